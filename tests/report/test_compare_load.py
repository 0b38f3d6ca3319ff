"""labkit compare under load (labkit/report/load_compare.py; docs/compare.md, "Under load"): the statistics
against hand-computed figures (Holm across levels, a percentile's z test from two order-statistic intervals,
the two-proportion test), capacities as ranges, levels one lane lacks and flagged levels, runs built by hand in
temp folders; then two lanes measured on the simulator, one with half the other's decode speed and half its
running cap, compared end to end."""

from __future__ import annotations

import json
import math

import pytest

from labkit import lab
from labkit import report as rp
from labkit.cli.app import main
from labkit.measure import BenchOptions, RunSummary, run_bench
from labkit.measures import measure_key
from labkit.recipe import DecodePlan, LoadPlan, MeasurePlan, PrefillPlan, SloPlan
from labkit.report.compare import ALPHA, FASTER, SLOWER
from labkit.report.family import corrected, holm
from labkit.report.load_compare import (
    RUNS,
    WITHIN,
    CapacitySide,
    capacity_reading,
    compare_percentiles,
    compare_shares,
    is_level_measure,
)
from labkit.sim.oracle import SimOracle
from labkit.store import ResultsStore
from tests.support.results import sim_plan

# ---- pure statistics -----------------------------------------------------------------------------------------


def test_holm_across_levels_by_hand():
    # four level figures, p = 0.01, 0.04, 0.03, 0.20. Sorted: 0.01 (x4 = 0.04), 0.03 (x3 = 0.09), 0.04 (x2 =
    # 0.08, but never below the one before: 0.09), 0.20 (x1 = 0.20). Only the first stays below 0.05.
    assert holm([0.01, 0.04, 0.03, 0.20]) == pytest.approx([0.04, 0.09, 0.09, 0.20])


def test_a_percentile_is_tested_from_two_order_statistic_intervals_by_hand():
    # A's p50 100 ms in [90, 110], B's 120 ms in [110, 130]: each se = 20 / (2·1.96), the difference's
    # √2 times that, so z = 20 / (√2 · 20 / 3.92) = 1.96·√2 and p = erfc(z / √2) = erfc(1.96) = 0.0056
    r = compare_percentiles(
        "load_ttft@load=4@stat=p50", (0.100, (0.090, 0.110), 40), (0.120, (0.110, 0.130), 40)
    )
    assert r.p == pytest.approx(math.erfc(1.959963984540054), rel=1e-9) and r.p == pytest.approx(
        0.0056, abs=1e-4
    )
    assert r.diff == pytest.approx(0.020) and r.verdict == SLOWER  # a higher TTFT is slower
    assert r.test == "order-statistic intervals, 40 vs 40 requests"
    # its 95 % interval: 0.020 ± 1.96 · √2 · 20 ms / 3.92 = 0.020 ± 0.01414
    assert (r.lo, r.hi) == (
        pytest.approx(0.020 - 0.02 / math.sqrt(2)),
        pytest.approx(0.020 + 0.02 / math.sqrt(2)),
    )
    # a side without an interval (too few requests for a p99) is not tested
    few = compare_percentiles("load_ttft@load=4@stat=p99", (0.1, None, 12), (0.2, (0.15, 0.25), 400))
    assert few.p is None and few.verdict == "too few requests" and "A has no 95 % interval" in few.why


def test_attainment_is_a_two_proportion_test_by_hand():
    # A: 24 of 24 within the SLO, B: 2 of 8. Pooled share 26/32 = 0.8125; se = √(0.8125·0.1875·(1/24 + 1/8))
    # = 0.15934; z = 0.75 / 0.15934 = 4.707; p = erfc(4.707 / √2) = 2.5e-6
    r = compare_shares("load_attainment@load=4", (1.0, 24), (0.25, 8))
    se = math.sqrt(0.8125 * 0.1875 * (1 / 24 + 1 / 8))
    assert r.p == pytest.approx(math.erfc(0.75 / se / math.sqrt(2)), rel=1e-12)
    assert r.p == pytest.approx(2.5e-6, rel=0.02) and r.verdict == "worse"
    same = compare_shares("load_attainment@load=1", (1.0, 8), (1.0, 8))
    assert same.p == 1.0 and same.verdict.startswith("equivalent")


def test_the_correction_decides_level_verdicts_together():
    # two level figures each significant alone (p 0.0056 and about 0.031): over a family of two, Holm
    # multiplies the smaller by 2 (0.011) and keeps the larger (0.031): both stay slower
    rows = [
        compare_percentiles(
            "load_ttft@load=1@stat=p50", (0.100, (0.090, 0.110), 40), (0.120, (0.110, 0.130), 40)
        ),
        compare_percentiles(
            "load_ttft@load=2@stat=p50", (0.100, (0.090, 0.110), 40), (0.115, (0.105, 0.125), 40)
        ),
    ]
    p1, p2 = rows[0].p, rows[1].p
    assert p1 is not None and p2 is not None and p1 < p2 < ALPHA
    fixed = corrected(rows)
    assert [r.p_adj for r in fixed] == pytest.approx([2 * p1, max(2 * p1, p2)])
    assert [r.family for r in fixed] == [2, 2] and all(r.verdict == SLOWER for r in fixed)
    # a third, untested row does not join the family
    assert corrected([*rows, compare_percentiles("x", (1.0, None, 3), (1.0, None, 3))])[0].family == 2


def test_level_measures_are_named_without_their_level():
    assert is_level_measure("load_ttft@stat=p99") and is_level_measure("load_goodput")
    assert not is_level_measure("load_ttft@load=4@stat=p99") and not is_level_measure("load_capacity_streams")
    assert not is_level_measure("decode_c1")


# ---- capacities ----------------------------------------------------------------------------------------------

SLO = "TTFT p99 <= 0.08 s"


def _cap(value, miss, slo=SLO, unit="streams"):
    return CapacitySide(unit, slo, (value,), (miss,))


def test_capacities_are_ranges_from_the_level_met_to_the_level_missed():
    higher = capacity_reading(_cap(2, 3), _cap(4, 5))
    assert higher.verdict == "B higher" and "B met 4 streams, where A missed 3" in higher.why
    assert capacity_reading(_cap(4, None), _cap(2, 3)).verdict == "A higher"  # A's ladder never missed
    overlap = capacity_reading(_cap(2, 4), _cap(3, 5))
    assert overlap.verdict == "ranges overlap" and "[2, 4) streams" in overlap.why
    assert capacity_reading(_cap(4, 5), _cap(4, 5)).verdict == "ranges overlap"
    assert capacity_reading(_cap(None, 1), _cap(1, 2)).verdict == "B higher"  # A met no level at all
    # over runs: the lowest level every run met to the highest a run missed
    runs = CapacitySide("streams", SLO, (4, 6), (5, 7))
    assert (runs.lo, runs.hi) == (4, 7) and runs.text() == "runs met 4, 6 streams (missed 5, 7)"


def test_capacities_under_different_slos_or_units_are_not_compared():
    other = capacity_reading(_cap(2, 3), _cap(4, 5, slo="TTFT p99 <= 0.2 s"))
    assert (
        other.verdict == "not compared"
        and "different SLOs (A: TTFT p99 <= 0.08 s; B: TTFT p99 <= 0.2 s)" in other.why
    )
    units = capacity_reading(_cap(2, 3), _cap(4, 5, unit="req/s"))
    assert units.verdict == "not compared" and "not one scale" in units.why
    assert capacity_reading(_cap(2, 3), None).why.startswith("only A has a capacity")


# ---- stored runs built by hand ---------------------------------------------------------------------------------


def _level(axis: str, level, ttft: float, tpot: float, tps: float, **entry) -> tuple[dict, dict]:
    """One level's measures and summary.load entry (intervals ±10 % around the percentiles)."""
    m = {
        measure_key("load_ttft", **{axis: level}, stat="p50"): ttft,
        measure_key("load_tpot", **{axis: level}, stat="p50"): tpot,
        measure_key("load_output_tps", **{axis: level}): tps,
    }
    intervals = {k: [v * 0.9, v * 1.1] for k, v in m.items() if "@stat=" in k}
    window = f"load@{axis}={level}"
    loop = "closed" if axis == "load" else "open"
    return m, {
        window: {
            "loop": loop,
            "level": level,
            "requests": 40,
            "answered": 40,
            "intervals": intervals,
            **entry,
        }
    }


def _store(root, spec: str, levels, run_id: str, capacity: dict | None = None) -> None:
    measures, load = {}, {}
    for m, e in levels:
        measures.update(m)
        load.update(e)
    if capacity is not None:
        load["capacity"] = capacity
    with ResultsStore(root).new_run(sim_plan(spec), run_id=run_id) as run:
        run.finish(RunSummary(measures=measures, n_ok=40, load=load), boot={}, provenance={"harness": "test"})


def test_runs_per_level_levels_one_lane_lacks_and_a_client_bound_level(tmp_path):
    root = tmp_path / "results"
    for i in range(3):
        jitter = 1 + 0.01 * i
        a = [
            _level("load", 1, 0.010 * jitter, 0.005, 190 * jitter),
            _level("load", 4, 0.020, 0.006, 600 * jitter),
        ]
        a.append(_level("rate", 2, 0.012, 0.005, 60.0))
        b = [_level("load", 1, 0.020 * jitter, 0.010, 95 * jitter), _level("load", 8, 0.05, 0.01, 800.0)]
        b.append(
            _level("rate", 2, 0.012, 0.005, 60.0, client_bound=True)
            if i == 1
            else _level("rate", 2, 0.012, 0.005, 60.0)
        )
        _store(root, "none", a, f"20261201T00000{i}Z-aaaaa{i}")
        _store(root, "dspark", b, f"20261201T00001{i}Z-bbbbb{i}")
    c = lab.compare("sim@spec=none", "sim@spec=dspark", results=root)
    assert c.load is not None and {r.method for r in c.load.rows} == {RUNS}
    rows = {r.row.measure: r.row for r in c.load.rows}
    assert set(rows) == {"load_ttft@load=1@stat=p50", "load_tpot@load=1@stat=p50", "load_output_tps@load=1"}
    assert (
        rows["load_tpot@load=1@stat=p50"].verdict == SLOWER
        and rows["load_output_tps@load=1"].verdict == SLOWER
    )
    assert (
        rows["load_ttft@load=1@stat=p50"].test == "Welch t, 3 vs 3 runs"
        and rows["load_ttft@load=1@stat=p50"].family == 3
    )
    assert [(n.label, n.why) for n in c.load.only] == [("c4", "only A ran it"), ("c8", "only B ran it")]
    (flagged,) = c.load.flagged
    assert flagged.label == "2/s" and "B run 20261201T000011Z-bbbbb1: client-bound" in flagged.why
    text = rp.compare_text(c)
    assert "Tested over runs: several runs of the level per lane" in text
    assert "| c1      | TPOT p50 " in text and "c1 TPOT p50: slower — p < 1e-15" in text
    assert "not compared, only A ran it: c4" in text and "2/s: flagged, left out of the verdicts" in text
    assert "Capacity" not in text  # no run searched for one


def test_an_invalid_level_and_different_slos(tmp_path):
    root = tmp_path / "results"
    cap = {"loop": "closed", "value": 4, "miss": 5, "slo": SLO}
    a = [_level("load", 1, 0.010, 0.005, 190.0)]
    b = [_level("load", 1, 0.020, 0.010, 95.0, invalid=True, why="3 of 40 requests failed (7.5%)")]
    _store(root, "none", a, "20261201T000000Z-aaaaa0", cap)
    _store(
        root,
        "dspark",
        b,
        "20261201T000010Z-bbbbb0",
        {**cap, "value": 2, "miss": 3, "slo": "TTFT p99 <= 0.2 s"},
    )
    c = lab.compare("sim@spec=none", "sim@spec=dspark", results=root)
    assert c.load is not None and c.load.rows == []
    assert "invalid (3 of 40 requests failed (7.5%))" in c.load.flagged[0].why
    text = rp.compare_text(c)
    assert "A: 4 streams (5 missed) under TTFT p99 <= 0.08 s" in text
    assert "not compared — the lanes searched under different SLOs" in text


# ---- two lanes measured on the simulator -------------------------------------------------------------------------

# B decodes at half A's speed and runs at most 2 requests at once (A 4); a 32-token answer takes 160 ms in A and
# 320 ms in B. The SLO bounds the TTFT median at 100 ms, not the p99: a test machine's scheduling stall of a
# second (seen at a load of 4 per core) lands on one request and moves a p99 of 12, never their median. At 4
# streams none of A's requests queue (a TTFT of a step or two, well under 100 ms), while 10 of B's 12 wait at
# least a whole answer; so A's capacity is 4 streams or more, B's below 4, and which is higher is certain
# (the exact boundaries are not: at 5 or 6 streams some requests queue and some do not). B's TPOT is twice A's
# at every level.
LOAD = LoadPlan(
    concurrency=(1, 2, 4, 8), level_requests=12, prompt_tokens=64, output_tokens=32, profile="capacity"
)
BOUND = SloPlan(ttft_s=0.1, percentile=50.0)
LANES = (
    ("none", {"decode_tps": 200, "max_num_seqs": 4}),
    ("dspark", {"decode_tps": 100, "max_num_seqs": 2}),
)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("load-compare") / "results"
    plan = MeasurePlan(
        "chat",
        1,
        DecodePlan((1,), 0, 16, 0),
        PrefillPlan((), 1),
        30.0,
        workloads={"load": LOAD, "slo": BOUND},
    )
    for spec, sets in LANES:
        with SimOracle(sets={"prefill_tps": 20000, "max_num_batched_tokens": 512, **sets}) as sim:
            res = run_bench(sim.url, plan, BenchOptions(progress=False))
        with ResultsStore(root).new_run(sim_plan(spec)) as run:
            run.write_requests(res.records)
            run.finish(res.summary, boot={}, provenance={"harness": "test"})
    return root


def test_two_simulated_lanes_compared_level_by_level_and_by_capacity(measured, capsys):
    args = ["compare", "sim@spec=none", "sim@spec=dspark", "--results", str(measured)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "Under load, level by level (B against A):" in out
    assert "Tested within one run: each lane has one run of the level" in out
    for level in ("c1", "c2", "c4"):  # the levels both searches ran
        assert f"{level} TPOT p50: slower — p < 1e-15, Holm-adjusted over " in out
    assert "c1 output t/s" in out and "one run each" in out  # shown, not tested, from one run
    assert "c1 TTFT p99" in out and "too few requests" in out  # 12 requests hold no p99 interval
    (only_a,) = [line for line in out.splitlines() if line.startswith("  not compared, only A ran it: ")]
    assert "c8" in only_a  # B's search never went past c4
    assert "Capacity under the SLO (TTFT p50 <= 0.1 s):" in out
    assert "A higher — A met " in out and "where B missed " in out
    assert "Holm over the " in out and "figures at load levels" in out
    # the notebook's view: the level table as its one table (no empty measure table), the correction said once
    shown = rp.ShownComparison(
        lab.compare("sim@spec=none", "sim@spec=dspark", results=measured)
    )._repr_html_()
    assert (
        shown.count("<table") == 1
        and shown.count("family-wise correction") + shown.count("Family-wise correction") == 1
    )
    assert "Capacity under the SLO" in shown and "A higher" in shown


def test_the_json_and_the_regression_gate_under_load(measured, capsys):
    args = ["compare", "sim@spec=none", "sim@spec=dspark", "--results", str(measured)]
    assert main([*args, "--json", "--measure", "load_tpot@stat=p50"]) == 0
    doc = json.loads(capsys.readouterr().out)
    levels = doc["load"]["levels"]
    assert [(x["level"], x["figure"], x["method"], x["verdict"]) for x in levels] == [
        (lv, "load_tpot@stat=p50", WITHIN, SLOWER) for lv in ("c1", "c2", "c4")
    ]
    assert all(x["family"] == 3 and x["p_adj"] < ALPHA for x in levels)
    assert doc["load"]["capacity"]["verdict"] == "A higher" and doc["measures"] == []
    # B's TPOT is twice A's: a 10 % regression gate fails on it; swapped, B is the faster lane
    assert main([*args, "--measure", "load_tpot@stat=p50", "--fail-on-regression", "10"]) == 1
    assert "regression: load_tpot@load=1@stat=p50 +" in capsys.readouterr().err
    swapped = ["compare", "sim@spec=dspark", "sim@spec=none", "--results", str(measured)]
    assert main([*swapped, "--measure", "load_tpot@stat=p50", "--fail-on-regression", "10"]) == 0
    assert f"c1 TPOT p50: {FASTER}" in capsys.readouterr().out
    assert main([*args, "--json", "--measure", "load_capacity_streams"]) == 0
    alone = json.loads(capsys.readouterr().out)["load"]
    assert alone["levels"] == alone["not_compared"] == [] and alone["capacity"]["verdict"] == "A higher"
    # a closed loop sends on no schedule, so has no lateness at any level
    with pytest.raises(rp.CompareError, match="'load_lateness@stat=p99' is at no load level of either side"):
        lab.compare("sim@spec=none", "sim@spec=dspark", measures=["load_lateness@stat=p99"], results=measured)
