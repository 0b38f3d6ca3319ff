"""measure.target_ci on the simulator: repetitions stop when every target measure's interval is tight enough,
or at measure.max_runs; each run records where the target stood; bad target settings fail when read."""

from __future__ import annotations

import dataclasses
import json

import pytest

from labkit import lab
from labkit.errors import RecipeError
from labkit.report import check_target
from tests.support.lanes import NO_TELEMETRY, sim_recipe

pytestmark = pytest.mark.alone  # timing truths within a few percent (tests/support/workers.py)

PORT = 18781


def _plan(tmp_path, monkeypatch, measure: str):
    """The test lane with `measure` lines, without node telemetry: what is tested is when the runs stop."""
    sim_recipe(tmp_path / "recipes" / "cisim", port=PORT, measure=f"{measure}\n{NO_TELEMETRY}")
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    return lab.plan("cisim")


def _targets(done) -> list[dict]:
    return [json.loads((d / "run.json").read_text())["target"] for d in done.run_dirs]


def test_stops_once_the_interval_is_reached(tmp_path, monkeypatch, capsys):
    # decode only: a 512-token prefill lasts ~0.1 s, so its timing jitter can exceed 5 % on a busy machine
    plan = _plan(tmp_path, monkeypatch, 'target_ci = 0.05\nmax_runs = 6\ntarget_measures = ["decode_c1"]')
    assert dataclasses.replace(plan.measure, target_measures=()).ci_measures() == ("decode_c1", "prefill_512")
    assert "up to 6, until the 95 % CI of decode_c1 is within ±5 %" in lab.describe(plan)
    done = lab.measure(plan, results=tmp_path / "results", progress=True)
    # the sim is steady to well under 5 %: the first interval (3 runs) is already inside the target
    assert len(done.run_dirs) == 3
    assert done.target.reached and done.target.n == 3
    states = _targets(done)
    assert [s["runs"] for s in states] == [1, 2, 3]
    assert [s["reached"] for s in states] == [False, False, True]
    assert states[0]["relative_half_width"]["decode_c1"] is None  # no interval from one run
    assert 0 < states[2]["relative_half_width"]["decode_c1"] <= 0.05
    err = capsys.readouterr().err
    assert "target ±5 %: decode_c1 — (n=1, an interval needs 3)" in err
    assert "— reached" in err


def test_stops_at_max_runs_when_a_measure_never_tightens(tmp_path, monkeypatch):
    # the sim lane has no speculation: accept_length never has a value, so its interval never exists
    plan = _plan(tmp_path, monkeypatch, 'target_ci = 0.05\nmax_runs = 4\ntarget_measures = ["accept_length"]')
    done = lab.measure(plan, results=tmp_path / "results", progress=False)
    assert len(done.run_dirs) == 4
    assert not done.target.reached
    last = _targets(done)[-1]
    assert last["runs"] == 4 and last["values"] == {"accept_length": 0}
    assert last["relative_half_width"] == {"accept_length": None}


def test_without_target_the_plan_runs_exactly_runs_times(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "runs = 2")
    assert plan.measure.ci_run_cap() == 2
    done = lab.measure(plan, results=tmp_path / "results", progress=False)
    assert len(done.run_dirs) == 2 and done.target is None
    assert "target" not in json.loads((done.run_dirs[1] / "run.json").read_text())


@pytest.mark.parametrize(
    ("lines", "key", "says"),
    [
        ("target_ci = 0.0", "measure.target_ci", "relative half-width"),
        ("target_ci = 1.5", "measure.target_ci", "relative half-width"),
        ("target_ci = 0.02\nmax_runs = 2", "measure.max_runs", "below 3"),
        ("target_ci = 0.02\nruns = 5\nmax_runs = 4", "measure.max_runs", "below measure.runs (5)"),
        ('target_ci = 0.02\ntarget_measures = ["decode_c3"]', "measure.target_measures[0]", "decode_c1"),
        ("max_runs = 5", "measure.max_runs", "only used with measure.target_ci"),
    ],
)
def test_bad_target_settings_name_the_key(tmp_path, monkeypatch, lines, key, says):
    with pytest.raises(RecipeError) as err:
        _plan(tmp_path, monkeypatch, lines)
    assert key in str(err.value) and says in str(err.value) and "recipe.toml" in str(err.value)


def test_check_target_is_pure_and_counts_only_values():
    check = check_target({"a": [100.0, 101.0, 99.0, None], "b": [None, None, None]}, 0.05, 4)
    assert check.counts == {"a": 3, "b": 0}
    assert check.widths["b"] is None and not check.reached
    # mean 100, s 1, t(0.975, 2) = 4.303: half-width 4.303/sqrt(3) = 2.484 -> 2.48 %
    assert check.widths["a"] == pytest.approx(0.024844, rel=1e-3)
    assert check_target({"a": [100.0, 101.0, 99.0]}, 0.025, 3).reached
    assert not check_target({"a": [100.0, 101.0, 99.0]}, 0.024, 3).reached
