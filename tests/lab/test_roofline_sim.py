"""The roofline on the simulator, whose truth is configured: bytes per token and a memory bandwidth make its
ceiling exact (bandwidth / bytes at c1, N x that / (1 + batch_beta (N - 1)) at cN) and its share known,
decode_tps x bytes / bandwidth at every level. A measured run stores both, and its shares recover the truth."""

from __future__ import annotations

import json

import pytest

from labkit import lab
from tests.support.lanes import sim_recipe

PORT = 18791
SETTINGS = {
    "decode_tps": 200.0,
    "batch_beta": 0.5,
    "roofline_bytes_per_token": 1.0e9,  # a 1 GB step per token ...
    "memory_bandwidth": 400.0e9,  # ... at 400 GB/s: 400 t/s at c1, so 200 t/s is 50 %
}
TRUTH = 100 * SETTINGS["decode_tps"] * SETTINGS["roofline_bytes_per_token"] / SETTINGS["memory_bandwidth"]


def test_the_simulators_share_is_its_configured_truth(tmp_path, monkeypatch):
    folder = tmp_path / "recipes" / "roof"
    sim_recipe(folder, PORT, settings=SETTINGS)
    toml = folder / "recipe.toml"
    short = "decode = { concurrency = [1], turns = 2, output_tokens = 16, warmup = 0 }"
    toml.write_text(
        toml.read_text().replace(
            short, "decode = { concurrency = [1, 2], turns = 4, output_tokens = 96, warmup = 0 }"
        )
    )
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    done = lab.measure(lab.plan("roof"), results=tmp_path / "results", progress=False)
    (folder_run,) = done.run_dirs
    doc = json.loads((folder_run / "run.json").read_text())
    m, method = doc["summary"]["measures"], doc["summary"]["method"]
    assert m["decode_c1_ceiling"] == 400.0 and m["decode_c2_agg_ceiling"] == 2 * 400.0 / 1.5
    assert TRUTH == 50.0
    assert m["decode_c1_roofline"] == pytest.approx(TRUTH, rel=0.003)
    assert m["decode_c2_agg_roofline"] == pytest.approx(TRUTH, rel=0.003)
    assert "the simulator's memory_bandwidth" in method["decode_c1_roofline"]
    assert doc["roofline"]["bandwidth"] == 400.0e9 and doc["roofline"]["decode"] == {
        "1": 400.0,
        "2": 2 * 400.0 / 1.5,
    }
    assert not [f for f in doc["summary"]["flags"] if f["code"] == "over-roofline"]


def test_a_share_above_the_ceiling_is_flagged(tmp_path, monkeypatch):
    """Bytes configured too low for the decode rate (200 t/s against a 100 t/s ceiling): the run is flagged."""
    folder = tmp_path / "recipes" / "over"
    sim_recipe(folder, PORT + 1, settings={**SETTINGS, "memory_bandwidth": 100.0e9})
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    done = lab.measure(lab.plan("over"), results=tmp_path / "results", progress=False)
    doc = json.loads((done.run_dirs[0] / "run.json").read_text())
    (flag,) = [f for f in doc["summary"]["flags"] if f["code"] == "over-roofline"]
    assert flag["window"] == "decode_c1_roofline"
    assert float(flag["message"].split(" %")[0]) == pytest.approx(200, rel=0.01)  # twice its ceiling
