"""The duration estimate (labkit/lab/timing.py): the plan's requests at the lane's stored seconds per request,
else its recorded speeds, plus its stored boot and staging times, each part saying what it used; read from a
copy of the committed lab record."""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics

import pytest

from labkit import lab
from labkit.cli.app import main
from labkit.measure import planned_requests
from labkit.store import load_results


def _requests(plan) -> int:
    """What the lab sends: `measure.runs` run folders of one repetition each, only the first with a cold turn."""
    once = dataclasses.replace(plan.measure, runs=1)
    return planned_requests(once, True) + (plan.measure.runs - 1) * planned_requests(once, False)


def test_a_measured_lane_is_timed_by_its_stored_runs_less_their_boot(lab_record):
    data = load_results(lab_record)
    plan = lab.plan("sim", spec="none")
    est = lab.estimate(plan, data=data)
    frame = data.measures
    per = []
    for doc in data.docs.values():
        if (doc.recipe, doc.variant_id, doc.source) != ("sim", "spec-none", "measured"):
            continue
        wall = (
            dt.datetime.fromisoformat(doc.finished) - dt.datetime.fromisoformat(doc.started)
        ).total_seconds()
        mine = frame[(frame["run"] == doc.run_id) & (frame["measure"] == "boot_s")]["value"]
        per.append((wall - float(mine.sum())) / doc.n_requests)
    boots = frame[
        (frame["recipe"] == "sim") & (frame["variant"] == "spec-none") & (frame["measure"] == "boot_s")
    ]
    assert est.requests == _requests(plan)
    assert est.measure_s == pytest.approx(est.requests * statistics.median(per))
    assert est.boot_s == pytest.approx(statistics.median(boots["value"])) and est.staging_s == 0.0
    assert est.total_s == pytest.approx(est.measure_s + est.boot_s)
    assert f"the median of {len(per)} stored runs of sim/spec-none" in est.line()


def test_a_lane_with_recorded_figures_only_is_timed_by_them_and_says_what_it_left_out(lab_record):
    data = load_results(lab_record)
    plan = lab.plan("dsv41", spec="dspark", staging="nas")
    est = lab.estimate(plan, data=data)
    per = 256 / 52.9 + 4096 / 605  # the note's decode c1 and ~4K prefill with DSpark on the NAS
    # three runs of one repetition each (the estimate once counted every repetition three times over)
    assert plan.measure.runs == 3 and est.requests == _requests(plan)
    assert est.measure_s == pytest.approx(est.requests * per)
    assert est.boot_s is None and "boot not known, left out" in est.line()
    assert "recorded decode c1 52.9 t/s" in est.line()
    prod = lab.estimate(lab.plan("prod"), data=data)  # a recorded range: its middle
    assert prod.measure_s == pytest.approx(
        prod.requests * (256 / ((47.8 + 50.7) / 2) + 4096 / ((2800 + 3127) / 2))
    )


def test_nothing_stored_gives_the_requests_only(tmp_path):
    est = lab.estimate(lab.plan("sim"), tmp_path / "empty")
    assert est.total_s is None and est.requests > 0
    assert est.line().startswith(f"estimate: {est.requests} requests; no stored speed")


def test_show_and_the_sweep_dry_run_print_the_estimate(lab_record, monkeypatch, capsys):
    monkeypatch.setenv("LABKIT_RESULTS", str(lab_record))
    assert main(["show", "sim"]) == 0
    assert "\nestimate: ~" in capsys.readouterr().out
    over = 'engine.args."--decode-tps"=20,31'
    assert main(["sweep", "sim", "--over", over, "--dry-run", "--results", str(lab_record)]) == 0
    out = capsys.readouterr().out
    assert "over 2 points" in out and "2 boots at 3 s each" in out
