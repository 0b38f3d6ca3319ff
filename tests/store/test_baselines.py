"""Node SM-clock baselines: written under <results>/_baselines/, the median of the last healthy runs, never
counted twice, invisible to the run loader, and a broken file is named."""

from __future__ import annotations

import pytest

from labkit.store import ResultsError, load_results, read_baselines, update_baselines
from labkit.store.baselines import KEEP as KEEP_BASELINE_RUNS


def test_update_and_read(tmp_path):
    assert read_baselines(tmp_path, ["dgx5"]) == {}
    assert update_baselines(tmp_path, {"dgx5": 2400.0, "dgx6": 2300.0}, "r1") == {
        "dgx5": 2400.0,
        "dgx6": 2300.0,
    }
    update_baselines(tmp_path, {"dgx5": 2200.0}, "r2")
    update_baselines(tmp_path, {"dgx5": 2200.0}, "r2")  # the same run again: not counted twice
    assert read_baselines(tmp_path, ["dgx5", "dgx6", "dgx7"]) == {"dgx5": 2300.0, "dgx6": 2300.0}
    assert (tmp_path / "_baselines" / "dgx5.json").is_file()
    assert len(load_results(tmp_path).runs) == 0  # not a run folder


def test_only_the_last_runs_count(tmp_path):
    for i in range(KEEP_BASELINE_RUNS):
        update_baselines(tmp_path, {"n": 600.0}, f"old{i}")  # a long stretch of a stuck GPU ...
    for i in range(KEEP_BASELINE_RUNS):
        update_baselines(tmp_path, {"n": 2400.0}, f"new{i}")  # ... then healthy again
    assert read_baselines(tmp_path, ["n"]) == {"n": 2400.0}


def test_bad_file_and_bad_node_name(tmp_path):
    (tmp_path / "_baselines").mkdir()
    (tmp_path / "_baselines" / "n.json").write_text("{not json")
    with pytest.raises(ResultsError, match=r"_baselines/n.json: not a node baseline"):
        read_baselines(tmp_path, ["n"])
    with pytest.raises(ResultsError, match="node name '../x'"):
        update_baselines(tmp_path, {"../x": 1.0}, "r")
