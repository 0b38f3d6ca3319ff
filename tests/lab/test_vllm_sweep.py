"""A sweep on the real vLLM CPU lane: two points over `--max-num-batched-tokens` boot vLLM twice, each with
its own value (the engine's own log says which), and both are stored as complete lanes with their record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from labkit import lab
from labkit.store import read_sweep
from tests.support.vllm import vllm_available
from tests.support.vllm_lanes import free_port, isolated

pytestmark = pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")
REPO = Path(__file__).resolve().parents[2]


def _recipe(folder: Path, port: int) -> None:
    """The shipped tiny-vllm recipe on a test port, with a short measurement plan, eager (no torch.compile at
    boot: what is tested is the two boots and their stored runs, not the compiled kernels)."""
    text = (REPO / "recipes" / "tiny-vllm" / "recipe.toml").read_text()
    text = text.replace("port = 18670", f"port = {port}")
    text = text.replace('"--dtype" = "bfloat16"', '"--dtype" = "bfloat16"\n"--enforce-eager" = true')
    text = re.sub(
        r"^decode = .*$",
        "decode = { concurrency = [1], turns = 1, output_tokens = 32, warmup = 0 }",
        text,
        flags=re.M,
    )
    text = re.sub(r"^prefill = .*$", "prefill = { prompt_tokens = [1024], repeats = 1 }", text, flags=re.M)
    folder.mkdir(parents=True)
    (folder / "recipe.toml").write_text(text)


def test_two_points_boot_vllm_twice_and_store_both(tmp_path, monkeypatch):
    _recipe(tmp_path / "recipes" / "tinyv", free_port())
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    results = tmp_path / "results"
    with isolated(tmp_path / "lane") as env:
        sw = lab.sweep(
            "tinyv", 'engine.args."--max-num-batched-tokens"=512,2048', results=results, progress=False
        )
        assert env.processes() == []  # both lanes torn down
    assert [p.status for p in sw.record.points] == ["measured", "measured"], [
        p.reason for p in sw.record.points
    ]
    assert [p.variant_id for p in sw.record.points] == ["spec-none_mnbt-512", "spec-none_mnbt-2048"]
    boots = []
    for point, value in zip(sw.record.points, (512, 2048), strict=True):
        (run_id,) = point.runs
        folder = results / "tinyv" / point.variant_id / run_id
        doc = json.loads((folder / "run.json").read_text())
        assert doc["status"] == "complete" and "boot_run" not in doc  # a boot of its own
        assert doc["plan"]["resolved"]["engine"]["args"]["--max-num-batched-tokens"] == value
        assert doc["summary"]["measures"]["decode_c1"] > 0
        log = (folder / "logs" / "localhost.log").read_text()
        # vLLM's "non-default args" line: the engine itself took the swept value
        assert f"'max_num_batched_tokens': {value}" in log
        assert (folder / "boot.json").is_file() and doc["boot"]["boot_seconds"] > 0
        boots.append(doc["boot"]["engine_version"])
    assert boots[0].startswith("0.32") and boots[0] == boots[1]  # two boots of one engine build
    assert read_sweep(sw.path).points == sw.record.points
    (table,) = lab.sweep_tables(sw)
    assert list(table.frame.index) == ["512", "2048"]
