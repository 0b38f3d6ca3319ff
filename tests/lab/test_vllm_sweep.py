"""A sweep on the real vLLM CPU lane: two points over `--max-num-batched-tokens` boot vLLM twice, each with its
own value (the engine's own log says which), and both are stored as complete lanes with their record. Each
point also measures prefill under decode (2,048-token prompts arriving while two streams decode: 8 prefill
chunks at the small budget, 1 at the large), whose figures must be present and consistent; what they show is
printed, not asserted (benchmarks/bench_prefill_tradeoff.py reports the trade-off over more budgets). Two
points, not three: each boot is ~35 s of the vLLM worker's serial time, and a third adds no new path."""

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
BUDGETS = (256, 4096)


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
    text = text.replace(
        "[measure]\n",
        "[measure]\ninterference = { prompt_tokens = [2048], streams = 2, stream_tokens = 512, warm_tokens = 8, "
        "arrivals = 2, spacing_s = 0.5 }\n",
        1,
    )
    folder.mkdir(parents=True)
    (folder / "recipe.toml").write_text(text)


def test_two_points_boot_vllm_twice_and_store_both(tmp_path, monkeypatch):
    _recipe(tmp_path / "recipes" / "tinyv", free_port())
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    results = tmp_path / "results"
    with isolated(tmp_path / "lane") as env:
        sw = lab.sweep(
            "tinyv",
            f'engine.args."--max-num-batched-tokens"={",".join(map(str, BUDGETS))}',
            results=results,
            progress=False,
        )
        assert env.processes() == []  # both lanes torn down
    assert [p.status for p in sw.record.points] == ["measured"] * len(BUDGETS), [
        p.reason for p in sw.record.points
    ]
    assert [p.variant_id for p in sw.record.points] == [f"spec-none_mnbt-{b}" for b in BUDGETS]
    boots, probes = [], []
    for point, value in zip(sw.record.points, BUDGETS, strict=True):
        (run_id,) = point.runs
        folder = results / "tinyv" / point.variant_id / run_id
        doc = json.loads((folder / "run.json").read_text())
        assert doc["status"] == "complete" and "boot_run" not in doc  # a boot of its own
        assert doc["plan"]["resolved"]["engine"]["args"]["--max-num-batched-tokens"] == value
        assert doc["summary"]["measures"]["decode_c1"] > 0
        _consistent_interference(folder, doc["summary"])
        log = (folder / "logs" / "localhost.log").read_text()
        # vLLM's "non-default args" line: the engine itself took the swept value
        assert f"'max_num_batched_tokens': {value}" in log
        assert (folder / "boot.json").is_file() and doc["boot"]["boot_seconds"] > 0
        boots.append(doc["boot"]["engine_version"])
        probes.append(doc["boot"]["probe"]["localhost"])
        # the roofline of the built model's own headers at the probed bandwidth; a tiny model on a CPU is
        # bound by per-step overhead, not by its 2.7 MB of weights, so its share is small: printed, not judged
        roof = doc["roofline"]
        assert "probed on localhost" in roof["bandwidth_source"] and roof["model"].startswith(
            "the headers of "
        )
        share = doc["summary"]["measures"]["decode_c1_roofline"]
        assert share > 0 and doc["summary"]["measures"]["decode_c1_ceiling"] == roof["decode"]["1"]
        # prefill against the probed matmul: FLOPs per token from the same headers
        assert (
            doc["summary"]["measures"]["prefill_1024_compute"] > 0
            and "matmul probed on localhost" in (doc["summary"]["method"]["prefill_1024_compute"])
        )
        print(f"{value}: decode c1 {share:.2f} % of its roofline ({roof['bandwidth_source']})")
    assert boots[0].startswith("0.32") and boots[0] == boots[1]  # two boots of one engine build
    # the device probe ran before the first boot with the engine's torch on this CPU; the others read its cache
    assert (
        probes[0]["tool"].startswith("torch ")
        and probes[0]["read_bytes_per_s"] > 0
        and "cached" not in probes[0]
    )
    assert probes[1].pop("cached").endswith(".json") and probes[1] == probes[0]
    assert read_sweep(sw.path).points == sw.record.points
    (table,) = lab.sweep_tables(sw)
    assert list(table.frame.index) == [str(b) for b in BUDGETS]
    assert {"arrival TTFT under decode, 2,048 (s)", "decode stall per 2,048 arrival (s)"} <= set(
        table.frame.columns
    )
    print(table.frame.to_string())  # what the trade-off looks like on this machine, for the log


def _consistent_interference(folder: Path, summary: dict) -> None:
    """Every arrival answered with its TTFT, both streams decoded through every arrival (no note says
    otherwise), the stall not negative and the longest gap at least the gap before."""
    import pandas as pd

    m = summary["measures"]
    key = "interference_2048"
    assert m[f"{key}_ttft"] > 0 and m[f"{key}_ttft_max"] >= m[f"{key}_ttft"]
    assert (
        m[f"{key}_stall"] >= 0
        and m[f"{key}_gap_max"] >= m[f"{key}_gap_before"] > 0
        and m[f"{key}_gap_after"] > 0
    )
    assert not any("raise stream_tokens" in n or "raise spacing_s" in n for n in summary.get("notes", []))
    rows = pd.read_csv(folder / "requests.csv")
    rows = rows[rows["phase"] == "interference"]
    arrivals = rows[rows["interference"] == "arrival"]
    assert len(arrivals) == 2 and arrivals["ok"].all() and (arrivals["ttft_s"] > 0).all()
    assert (arrivals["arriving_tokens"] == 2048).all()
    assert len(rows[(rows["interference"] == "stream") & rows["ok"]]) == 2
