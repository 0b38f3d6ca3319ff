"""The slow-state canary (docs/measurement.md, "Slow-state canary"): a sim lane measured through the lab path,
healthy first (its canary becomes the node set's baseline under results/_baselines/canary/), then the same lane,
same nodes, with the simulator slowed to a third of its decode rate, as a GPU stuck in a slow state: that run is
flagged slow-canary (the tables mark it like low-clock), and the slow figure does not move the baseline."""

from __future__ import annotations

import json

import pytest

from labkit import lab
from labkit.store import load_results, read_canary
from labkit.store.baselines import canary_path
from tests.support.lanes import sim_recipe
from tests.support.workers import free_port

PORTS = (18980, 18999)  # this file's sim ports, clear of the other tests' ranges
CANARY = "runs = {runs}\ncanary = {{ requests = 2, output_tokens = 32, slow = 0.5 }}"


def test_a_slowed_node_set_is_flagged_against_its_healthy_canary(tmp_path, monkeypatch):
    recipes, results = tmp_path / "recipes", tmp_path / "results"
    folder = recipes / "canary-sim"
    port = free_port(*PORTS)
    monkeypatch.setenv("LABKIT_RECIPES", str(recipes))
    sim_recipe(folder, port, settings={"decode_tps": 200.0}, measure=CANARY.format(runs=2))
    healthy = lab.measure(lab.plan("canary-sim"), results=results, progress=False)
    plan = lab.plan("canary-sim")
    first, second = (json.loads((d / "run.json").read_text()) for d in healthy.run_dirs)
    # the boot's first run: its cold turn comes first, so only the canary after the phases
    assert (
        "canary_ms_before" not in first["summary"]["measures"]
        and "canary_ms_after" in first["summary"]["measures"]
    )
    assert {"canary_ms_before", "canary_ms_after"} <= set(second["summary"]["measures"])
    assert all(f["code"] != "slow-canary" for d in (first, second) for f in d["summary"]["flags"])
    base = read_canary(results, plan.recipe_hash, ["localhost"])
    assert base == pytest.approx(5.0, rel=0.3)  # 200 t/s: 5 ms per token
    doc = json.loads(canary_path(results, plan.recipe_hash, ["localhost"]).read_text())
    assert doc["nodes"] == ["localhost"] and len(doc["runs"]) == 2

    (folder / "sim.toml").write_text("decode_tps = 66.0\n")  # the same lane in a slow state
    slow = lab.measure(lab.plan("canary-sim"), results=results, progress=False)
    runs = [json.loads((d / "run.json").read_text()) for d in slow.run_dirs]
    data = load_results(results)
    for run in runs:
        (flag,) = [f for f in run["summary"]["flags"] if f["code"] == "slow-canary"]
        assert (
            flag["window"] == "boot" and "on localhost" in flag["message"] and "bound +50%" in flag["message"]
        )
        assert run["summary"]["measures"]["canary_ms"] == pytest.approx(15.0, rel=0.3)
        # the canary's fixed prompt hits the prefix cache by design: no other flag; its records enter no figure
        assert {f["code"] for f in run["summary"]["flags"]} == {"slow-canary"}
        shown = data.measures[data.measures["run"] == run["run_id"]]["measure"]
        assert shown.str.startswith("canary").sum() == len(
            [k for k in run["summary"]["measures"] if k.startswith("canary")]
        )
    assert read_canary(results, plan.recipe_hash, ["localhost"]) == base  # a slow run is no baseline
