"""A load level's summary (labkit/measure/summary/load.py) from records with known figures: its keys with the
level and statistic qualifiers, the client-bound flag, the failed share that invalidates a level, the level
windows that cover exactly their own keys, and the load table's rows (docs/measurement.md, "Serving under
load")."""

from __future__ import annotations

from pathlib import Path

import pytest

from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.summary.compose import summarize
from labkit.measure.summary.load import failure_counts, load_measures, load_rows, mark_failed
from labkit.measure.workloads import window_of
from labkit.measures import level_key, level_window, parse_key, window_covers
from labkit.recipe import DecodePlan, LoadPlan, MeasurePlan, PrefillPlan, SloPlan
from labkit.report.tables import FLAG_MARK
from tests.support.results import first_table, flagged_run

pytestmark = pytest.mark.pure

MS = 1_000_000  # ns


def _rec(i: int, *, level: float, loop: str = "closed", ttft_ms: int, gap_ms: int = 10, n: int = 5, **kw):
    """An answered request sent at i·1000 ms with this TTFT and n tokens one per chunk `gap_ms` apart."""
    t0 = i * 1000 * MS
    chunks = [t0 + ttft_ms * MS + j * gap_ms * MS for j in range(n)]
    rec = RequestRecord(
        phase="load",
        load_loop=loop,  # type: ignore[arg-type]
        load_level=level,
        t_send=t0,
        t_first=chunks[0],
        t_last=chunks[-1],
        t_end=chunks[-1],
        chunk_t=chunks,
        chunk_n=[1] * n,
        output_tokens=n,
        prompt_tokens=100,
        ok=True,
        **kw,
    )
    return rec


def _plan(**kw) -> LoadPlan:
    return LoadPlan(**{"concurrency": (4,), "level_requests": 100, **kw})


def test_a_levels_percentiles_and_rates_carry_its_level_and_statistic():
    recs = [_rec(i, level=4.0, ttft_ms=i + 1) for i in range(100)]  # TTFT 1..100 ms
    s = RunSummary()
    load_measures(s, recs, _plan(), SloPlan(ttft_s=0.050))
    m = s.measures
    # linear percentiles of 1..100 ms: p50 at rank 49.5 -> 50.5 ms, p99 at rank 98.01 -> 99.01 ms
    assert m["load_ttft@load=4@stat=p50"] == pytest.approx(0.0505)
    assert m["load_ttft@load=4@stat=p99"] == pytest.approx(0.09901)
    assert m["load_itl@load=4@stat=p99"] == pytest.approx(0.010)
    assert m["load_tpot@load=4@stat=p50"] == pytest.approx(0.010)
    assert m["load_errors@load=4"] == 0.0
    assert m["load_attainment@load=4"] == pytest.approx(0.50)  # TTFT 1..50 ms within 50 ms
    entry = s.load["load@load=4"]
    assert entry["slo_met"] is False and entry["answered"] == 100 and entry["failed"] == 0
    lo, hi = entry["intervals"]["load_ttft@load=4@stat=p50"]
    assert lo < 0.0505 < hi
    assert entry["intervals"]["load_ttft@load=4@stat=p99"] is None  # 100 requests: too few for p99's
    assert all(parse_key(k) is not None for k in m)


def test_an_open_level_with_late_sends_is_flagged_client_bound_and_an_on_time_one_is_not():
    late = [
        _rec(i, level=2.0, loop="open", ttft_ms=5, lateness_s=(0.030 if i % 10 == 0 else 0.0002))
        for i in range(40)
    ]
    s = RunSummary()
    load_measures(s, late, _plan(concurrency=(), rate=(2.0,)), None)
    # 4 of 40 sends 30 ms late: p99 far over max(1 ms, 5 % of the 500 ms gap) = 25 ms
    assert s.load["load@rate=2"]["client_bound"] is True
    assert s.load["load@rate=2"]["lateness_threshold_s"] == pytest.approx(0.025)
    (flag,) = s.flags
    assert flag["code"] == "client-bound" and flag["window"] == "load@rate=2"
    assert s.measures["load_lateness@rate=2@stat=p50"] == pytest.approx(0.0002)
    on_time = [_rec(i, level=2.0, loop="open", ttft_ms=5, lateness_s=0.0002) for i in range(40)]
    s = RunSummary()
    load_measures(s, on_time, _plan(concurrency=(), rate=(2.0,)), None)
    assert s.load["load@rate=2"]["client_bound"] is False and s.flags == []


def _failed(i: int, level: float, error: str = "cut: x") -> RequestRecord:
    return RequestRecord(
        phase="load",
        load_loop="closed",
        load_level=level,
        t_send=i * MS,
        t_end=i * MS + 5,
        ok=False,
        error=error,
    )


def _measure_plan(load: LoadPlan) -> MeasurePlan:
    return MeasurePlan(
        "chat", 1, DecodePlan((1,), 0, 16, 0), PrefillPlan((), 1), 30.0, workloads={"load": load}
    )


def test_failures_within_the_share_are_counted_and_over_it_invalidate_only_that_level():
    plan = _measure_plan(_plan(concurrency=(2, 4), max_error_share=0.05))
    two = [_rec(i, level=2.0, ttft_ms=5) for i in range(96)] + [_failed(i, 2.0) for i in range(4)]  # 4 %
    four = [_rec(i, level=4.0, ttft_ms=5) for i in range(90)] + [_failed(i, 4.0) for i in range(10)]  # 10 %
    s = summarize(two + four, [], plan)
    assert s.measures["load_errors@load=2"] == pytest.approx(0.04)
    assert "load_ttft@load=2@stat=p50" in s.measures  # within the share: valid
    assert not any(k.endswith("load=4") or "load=4@" in k for k in s.measures)  # over it: left out
    assert s.sanity["load@load=4"]["invalid"] is True and "invalid" not in s.sanity["load@load=2"]
    assert "load_ttft@load=4@stat=p50" in s.sanity["load@load=4"]["excluded"]
    assert s.load["load@load=4"]["invalid"] is True and s.load["load@load=4"]["failures"]["cut"] == 10
    assert [f["window"] for f in s.flags] == ["load@load=4"]


def test_a_levels_failures_are_counted_by_kind_and_shown_in_its_row():
    plan = _measure_plan(_plan(concurrency=(2,), max_error_share=0.2))
    recs = [_rec(i, level=2.0, ttft_ms=5) for i in range(20)] + [
        _failed(20, 2.0, "HTTP 500: boom"),
        _failed(21, 2.0, "HTTP 502: bad gateway"),
        _failed(22, 2.0, "ConnectError: All connection attempts failed"),
        _failed(23, 2.0, "cut: no chunk for 0.6 s (stall bound 0.5 s)"),
        _failed(24, 2.0, "short: 3 of 5 tokens"),
    ]
    assert failure_counts(recs) == {"http_5xx": 2, "reset": 1, "cut": 1, "timeout": 0, "other": 1}
    s = summarize(recs, [], plan)
    entry = s.load["load@load=2"]
    assert entry["failed"] == 5 and entry["failures"] == failure_counts(recs)
    assert "invalid" not in entry and "level_failed" not in entry  # 5 of 25 is within the 20 % tolerated
    ((name, _, bits),) = load_rows(s)
    assert name == "load c2" and "5 failed (2 http_5xx, 1 reset, 1 cut, 1 other)" in bits


def test_the_level_the_engine_died_in_is_marked_failed_and_the_earlier_one_kept():
    one = [_rec(i, level=1.0, ttft_ms=5) for i in range(10)]
    two = [_rec(i, level=2.0, ttft_ms=5) for i in range(10, 19)] + [
        _failed(19, 2.0, "ReadError: Response payload is not completed")
    ]
    # 1 failed of 10 is within the share: a level the engine died in is failed whatever its share
    plan = _measure_plan(_plan(concurrency=(1, 2, 4), max_error_share=0.5))
    why = "http://h:1/health: ConnectError: All connection attempts failed"
    s = summarize(one + two, [], plan, failed_levels={"load@load=2": why})
    assert "load_ttft@load=1@stat=p50" in s.measures and s.load["load@load=1"]["failed"] == 0
    assert not [k for k in s.measures if "load=2" in k]  # its figures are left out
    entry = s.load["load@load=2"]
    assert entry["level_failed"] == why and entry["invalid"] is True and why in entry["why"]
    assert entry["failures"]["reset"] == 1 and entry["answered"] == 9
    assert "load@load=4" not in s.load
    rows = dict((name, bits) for name, _, bits in load_rows(s))
    assert "FAILED: the engine died during the level" in rows["load c2"]
    assert "FAILED" not in rows["load c1"]


def test_mark_failed_leaves_the_entry_it_was_given_alone():
    entry = {"failed": 1, "requests": 4}
    marked = mark_failed(entry, "gone")
    assert marked["level_failed"] == "gone" and marked["invalid"] is True and "invalid" not in entry


def test_a_capacity_search_the_engine_died_in_states_no_capacity():
    plan = _plan(concurrency=(1, 2, 4), profile="capacity")
    one = [_rec(i, level=1.0, ttft_ms=5) for i in range(10)]
    two = [_failed(i, 2.0, "ConnectError: All connection attempts failed") for i in range(10, 12)]
    s = RunSummary()
    load_measures(s, one + two, plan, SloPlan(ttft_s=1.0), failed_levels={"load@load=2": "gone"})
    assert "capacity" not in s.load and not [k for k in s.measures if "capacity" in k]
    assert any("engine died during the search" in n for n in s.notes)


def test_a_level_window_covers_its_own_keys_only():
    w = level_window("load", "rate", 0.5)
    assert w == "load@rate=0.5"
    assert window_covers(w, "load_ttft@rate=0.5@stat=p99") and window_covers(w, "load_errors@rate=0.5")
    assert not window_covers(w, "load_ttft@rate=5@stat=p99") and not window_covers(w, "decode_c1")
    assert not window_covers("load@load=4", "load_ttft@rate=4@stat=p99")
    assert window_of(_rec(0, level=0.5, loop="open", ttft_ms=1)) == w
    assert window_of(_rec(0, level=4.0, ttft_ms=1)) == "load@load=4"
    assert level_key("load_ttft@stat=p99", "load", 4) == "load_ttft@load=4@stat=p99"


LOAD_TABLE = """
[[table]]
id = "load"
title = "Latency and throughput under load"
columns = "auto"
axis = "load"
interval = "ci"
drop_empty_rows = true
empty = "no load"
rows = [
    { label = "TTFT p99 (s)", measure = "load_ttft@stat=p99", decimals = 3 },
    { label = "output (t/s)", measure = "load_output_tps", decimals = 0 },
    { label = "lateness p99 (s)", measure = "load_lateness@stat=p99", decimals = 4 },
    { label = "energy", measure = "energy_per_token_decode" },
]
"""


def test_the_load_table_has_a_row_per_level_closed_first_and_marks_a_client_bound_level(tmp_path):
    root = tmp_path / "results"
    flag = {"code": "client-bound", "window": "load@rate=0.5", "message": "load@rate=0.5: sends came late"}
    flagged_run(
        root,
        {
            "load_ttft@load=8@stat=p99": 0.9,
            "load_ttft@load=2@stat=p99": 0.2,
            "load_output_tps@load=2": 80.0,
            "load_ttft@rate=0.5@stat=p99": 0.3,
            "load_lateness@rate=0.5@stat=p99": 0.0123,
            "decode_c1": 50.0,
        },
        flags=[flag],
    )
    t = first_table(root, LOAD_TABLE, tmp_path)
    lane = t.frame.index[0][0]
    assert [label for _, label in t.frame.index] == ["c2", "c8", "0.5/s"]
    assert list(t.frame.columns) == ["TTFT p99 (s)", "output (t/s)", "lateness p99 (s)"]  # energy: dropped
    assert t.frame.loc[(lane, "c2"), "TTFT p99 (s)"].startswith("0.200")
    assert t.frame.loc[(lane, "0.5/s"), "lateness p99 (s)"].startswith("0.0123")
    assert t.frame.loc[(lane, "c8"), "lateness p99 (s)"] == "—"
    # the flag of the 0.5/s level marks its cells only
    assert t.frame.loc[(lane, "0.5/s"), "TTFT p99 (s)"].endswith(FLAG_MARK)
    assert not t.frame.loc[(lane, "c2"), "TTFT p99 (s)"].endswith(FLAG_MARK)
    assert any(n.startswith(FLAG_MARK) and "client-bound" in n for n in t.notes)


def test_the_committed_capacity_table_has_a_row_per_lane(tmp_path):
    from labkit import report
    from labkit.store import load_results

    root = tmp_path / "results"
    flagged_run(root, {"load_capacity_streams": 12.0, "decode_c1": 50.0})
    _, specs = report.load_spec(Path(__file__).resolve().parents[2] / "results" / "tables.toml")
    (t,) = report.stored_tables(load_results(root), specs, only=["capacity"])
    assert t.title == "Capacity under the SLO"
    assert list(t.frame.columns) == ["capacity (closed-loop streams)"]  # no rate capacity: dropped
    assert t.frame.iloc[0]["capacity (closed-loop streams)"].startswith("12")


def test_measured_lanes_gain_a_ttft_p99_row_per_load_level(tmp_path):
    from labkit import report
    from labkit.store import load_results

    root = tmp_path / "results"
    flagged_run(
        root,
        {
            "decode_c1": 50.0,
            "load_ttft@load=8@stat=p99": 0.9,
            "load_ttft@load=2@stat=p99": 0.25,
            "load_ttft@rate=0.5@stat=p99": 0.4,
            "load_ttft@load=2@stat=p50": 0.1,
        },
    )
    _, specs = report.load_spec(Path(__file__).resolve().parents[2] / "results" / "tables.toml")
    (t,) = report.stored_tables(load_results(root), specs, only=["measured"])
    rows = [label for label in t.frame.index if "under load" in label]
    assert rows == [
        "TTFT p99 under load at c2 (s)",
        "TTFT p99 under load at c8 (s)",
        "TTFT p99 under load at 0.5/s (s)",
    ]
    assert t.frame.loc["TTFT p99 under load at c2 (s)"].iloc[0].startswith("0.250")
