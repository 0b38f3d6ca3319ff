"""An engine that dies mid-level on a measured lane (docs/measurement.md, "Serving under load"): the run ends
there, failed, with the levels before it stored in its folder, the lane's teardown names the dead node, and
nothing of the lane is left running."""

from __future__ import annotations

import json

import pytest

from labkit import lab
from labkit.serve.errors import LaneFailed
from labkit.store import read_run
from labkit.store.load import read_records
from tests.support.lanes import sim_recipe
from tests.support.workers import free_port

PORTS = (19140, 19159)  # this file's sim ports, clear of the other tests' ranges
LOAD = "[measure.load]\nconcurrency = [1, 2, 4]\nprompt_tokens = 64\noutput_tokens = 16\nrequests = 6\n"
# generation requests since boot: the cold turn and 2 decode turns, then the load warm-up and 6 at c1, the c2
# warm-up, and the 3rd request of c2 makes the simulator exit
FAULT = {"fault_exit_request": 14, "fault_exit_after_tokens": 4}


def test_a_lane_whose_engine_dies_mid_level_stores_the_earlier_level_and_leaves_nothing_running(
    tmp_path, monkeypatch, local_env
):
    recipes = tmp_path / "recipes"
    sim_recipe(recipes / "diesim", port=free_port(*PORTS), settings=FAULT, extra=LOAD)
    monkeypatch.setenv("LABKIT_RECIPES", str(recipes))
    with pytest.raises(LaneFailed, match="engine died on localhost") as e:
        lab.measure(lab.plan("diesim"), results=tmp_path / "results", progress=False)
    assert "simulated fault" in str(e.value)  # the dead node's log tail
    (folder,) = [p.parent for p in (tmp_path / "results").rglob("run.json")]
    doc = json.loads((folder / "run.json").read_text())
    assert doc["status"] == "failed" and "the engine died during load level load@load=2" in doc["error"]
    load = [r for r in read_records(read_run(folder)) if r.phase == "load"]
    one = [r for r in load if r.load_level == 1.0]
    assert len(one) == 6 and all(r.ok for r in one)  # the level before is stored whole
    assert {r.load_level for r in load} == {1.0, 2.0}  # the third level never ran
    assert doc["summary"] is None  # a failed run gives the tables no figure ...
    summary = doc["partial"]["summary"]  # ... but keeps what it measured
    assert "load_ttft@load=1@stat=p50" in summary["measures"]
    assert summary["load"]["load@load=2"]["level_failed"] and "load@load=4" not in summary["load"]
    assert any(n.startswith("load@load=2: the engine stopped answering") for n in summary["notes"])
    assert local_env.processes() == []  # the lane's teardown left nothing running
