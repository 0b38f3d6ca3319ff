"""The load plots (labkit/report/load_plots.py): runs with load levels written into a temp results folder,
then the figures' data: a line per lane and loop at the median over runs, each point named by its level, the
log scale decision, the TTFT ECDF per level with its p50 and p99, and where `labkit report` and the notebook
put them."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from labkit import report as rp
from labkit.lab.runs import LaneRun
from labkit.lab.show import figures
from labkit.measure import RequestRecord, RunSummary
from labkit.measures import measure_key
from labkit.report.load_plots import latest_load_runs, load_points, log_scale, ttft_levels
from labkit.store import ResultsStore, load_results
from tests.support.results import flagged_run, make_sim_run, sim_plan

STREAMS = (1, 2, 4, 8, 16)
TPS = (30.0, 55.0, 90.0, 130.0, 150.0)
P99 = (0.2, 0.3, 0.6, 1.5, 4.0)
P50 = (0.1, 0.15, 0.3, 0.7, 1.8)


def level_measures(axis: str, levels, tps, p50, p99) -> dict[str, float]:
    """A run's load measures at these levels, keyed as the load summary keys them."""
    out: dict[str, float] = {"decode_c1": 30.0}
    for level, t, a, b in zip(levels, tps, p50, p99, strict=True):
        out[measure_key("load_output_tps", **{axis: level})] = t
        out[measure_key("load_ttft", **{axis: level}, stat="p50")] = a
        out[measure_key("load_ttft", **{axis: level}, stat="p99")] = b
    return out


def closed(scale: float = 1.0) -> dict[str, float]:
    return level_measures("load", STREAMS, [t * scale for t in TPS], P50, [p * scale for p in P99])


def load_records(run_id: str, ttfts: dict[float, list[float]], loop: str = "closed") -> list[RequestRecord]:
    """Answered load requests with these TTFTs (s) per level, sent a second apart, plus one failed request and
    one warmup per level that no figure may count."""
    out = []
    for level, values in ttfts.items():
        for i, ttft in enumerate([*values, 0.001, 0.002]):
            t_send = i * 1_000_000_000
            t_first = t_send + round(ttft * 1e9)
            out.append(
                RequestRecord(
                    run_id=run_id,
                    lane="sim",
                    phase="warmup" if i == len(values) + 1 else "load",
                    ok=i != len(values),
                    error="" if i != len(values) else "http 500",
                    load_loop=loop,  # type: ignore[arg-type]
                    load_level=level,
                    output_tokens=32,
                    t_send=t_send,
                    t_first=t_first,
                    t_last=t_first + 500_000_000,
                    t_end=t_first + 500_001_000,
                    ttft_s=ttft,
                )
            )
    return out


def load_run(root, measures: dict[str, float], records_of, spec: str = "none", run_id=None) -> str:
    """A finished sim-lane run with these measures and the records `records_of(run_id)` gives; its run id."""
    with ResultsStore(root).new_run(sim_plan(spec), run_id=run_id) as run:
        run.write_requests(records_of(run.run_id))
        run.finish(RunSummary(measures=dict(measures), n_ok=4), boot={}, provenance={"harness": "test"})
    return run.run_id


@pytest.fixture
def two_lanes(tmp_path):
    """Lane spec-none: three runs (scales 0.9, 1.0, 1.2 of the curve); lane spec-dspark: one faster run."""
    root = tmp_path / "results"
    for scale in (0.9, 1.0, 1.2):
        flagged_run(root, closed(scale))
    flagged_run(root, closed(1.5), spec="dspark")
    return load_results(root)


def lines_of(ax):
    return [line for line in ax.get_lines() if line.get_label() and not line.get_label().startswith("_")]


def test_a_line_per_lane_at_the_median_over_its_runs(two_lanes):
    fig = rp.latency_throughput(two_lanes.measures)
    top, bottom = fig.axes
    assert top.get_ylabel() == "TTFT p99 (s)" and bottom.get_ylabel() == "TTFT p50 (s)"
    assert bottom.get_xlabel() == "output t/s of the level (all its requests)"
    dspark, none = lines_of(top)  # lanes in (recipe, variant) order, as the bar plot has them
    assert "spec-none" in none.get_label() and none.get_label().endswith(", closed loop")
    assert "spec-dspark" in dspark.get_label()
    # three runs at 0.9, 1.0 and 1.2 times the curve: the median is the 1.0 run
    assert list(none.get_xdata()) == pytest.approx(TPS) and list(none.get_ydata()) == pytest.approx(P99)
    assert list(dspark.get_xdata()) == pytest.approx([t * 1.5 for t in TPS])
    assert list(dspark.get_ydata()) == pytest.approx([p * 1.5 for p in P99])
    assert [list(line.get_ydata()) for line in lines_of(bottom)] == [list(P50), list(P50)]
    assert [t.get_text() for t in top.texts] == ["c1", "c2", "c4", "c8", "c16"] * 2
    assert [t.xy for t in top.texts[5:]] == pytest.approx(list(zip(TPS, P99, strict=True)))
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [dspark.get_label(), none.get_label()]


def test_the_median_of_two_runs_is_their_mean_and_a_missing_figure_leaves_its_point_out(tmp_path):
    root = tmp_path / "results"
    flagged_run(root, level_measures("load", (4,), (100.0,), (0.5,), (1.0,)))
    flagged_run(root, level_measures("load", (4, 8), (120.0, 140.0), (0.7, 1.1), (2.0, 3.0)))
    flagged_run(root, {measure_key("load_ttft", load=16, stat="p99"): 9.0})  # no t/s: no point at c16
    data = load_results(root)
    (lane,) = lines_of(rp.latency_throughput(data.measures).axes[0])
    assert list(lane.get_xdata()) == [110.0, 140.0] and list(lane.get_ydata()) == [1.5, 3.0]
    assert [(p.label, p.output_tps, p.p99) for p in load_points(data.measures)] == [
        ("c4", 110.0, 1.5),
        ("c8", 140.0, 3.0),
        ("c16", None, 9.0),
    ]


def test_open_loop_rates_are_a_dashed_series_of_their_own(tmp_path):
    root = tmp_path / "results"
    flagged_run(root, closed())
    flagged_run(root, level_measures("rate", (0.5, 2.0), (20.0, 70.0), (0.1, 0.2), (0.25, 0.9)))
    fig = rp.latency_throughput(load_results(root).measures)
    streams, rates = lines_of(fig.axes[0])
    assert streams.get_linestyle() == "-" and rates.get_linestyle() == "--"
    assert rates.get_label().endswith(", open loop")
    assert list(rates.get_xdata()) == [20.0, 70.0] and list(rates.get_ydata()) == [0.25, 0.9]
    assert [t.get_text() for t in fig.axes[0].texts][-2:] == ["0.5/s", "2/s"]


def test_agentic_session_levels_are_a_dotted_series_of_their_own(tmp_path):
    root = tmp_path / "results"
    flagged_run(root, level_measures("sessions", (2, 8), (40.0, 90.0), (0.1, 0.3), (0.2, 1.1)))
    fig = rp.latency_throughput(load_results(root).measures)
    (sessions,) = lines_of(fig.axes[0])
    assert sessions.get_linestyle() == ":" and sessions.get_label().endswith(", agentic sessions")
    assert [t.get_text() for t in fig.axes[0].texts] == ["s2", "s8"]


def test_a_latency_axis_is_logarithmic_only_past_twenty_times(tmp_path):
    assert not log_scale([0.2, 4.0]) and log_scale([0.2, 4.1]) and not log_scale([])
    root = tmp_path / "results"
    flagged_run(root, level_measures("load", (1, 16), (30.0, 150.0), (0.1, 1.0), (0.1, 5.0)))
    top, bottom = rp.latency_throughput(load_results(root).measures).axes
    assert top.get_yscale() == "log" and bottom.get_yscale() == "linear"  # p99 50x, p50 10x


def test_without_load_levels_the_curve_says_so_and_no_run_is_picked(tmp_path):
    root = tmp_path / "results"
    flagged_run(root, {"decode_c1": 30.0, "decode_c2_agg": 55.0})
    data = load_results(root)
    fig = rp.latency_throughput(data.measures)
    assert all(not lines_of(ax) and [t.get_text() for t in ax.texts] == ["no load levels"] for ax in fig.axes)
    assert rp.load_runs(data.measures) == [] and latest_load_runs(data.measures) == []
    assert rp.load_runs(load_results(tmp_path / "empty").measures) == []


TTFTS = {1.0: [0.3, 0.1, 0.2, 0.4], 4.0: [0.5, 0.9, 0.7, 1.9, 1.1]}  # 0.1 to 1.9 s: under 20x


def test_the_ttft_distribution_is_a_step_line_per_level_with_its_percentiles(tmp_path):
    root = tmp_path / "results"
    rid = load_run(root, closed(), lambda r: load_records(r, TTFTS))
    requests = load_results(root).requests([rid])
    assert [(a, lvl, v) for a, lvl, v in ttft_levels(requests)] == [
        ("load", 1, pytest.approx(sorted(TTFTS[1.0]))),
        ("load", 4, pytest.approx(sorted(TTFTS[4.0]))),
    ]  # the failed request and the warmup are left out
    fig = rp.ttft_distribution(requests, "run x")
    ax = fig.axes[0]
    steps = [line for line in lines_of(ax) if line.get_drawstyle() == "steps-post"]
    assert len(steps) == 2
    for line, values in zip(steps, TTFTS.values(), strict=True):
        n, xs = len(values), sorted(values)
        assert list(line.get_xdata()) == pytest.approx([xs[0], *xs])
        assert list(line.get_ydata()) == pytest.approx([0.0, *((k + 1) / n for k in range(n))])
        p50, p99 = np.percentile(values, 50), np.percentile(values, 99)
        dots = [
            (m.get_xdata()[0], m.get_ydata()[0]) for m in ax.get_lines() if m.get_color() == line.get_color()
        ]
        assert (pytest.approx(p50), 0.5) in dots and (pytest.approx(p99), 0.99) in dots
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0] == f"c1: p50 {statistics.median(TTFTS[1.0]):.3g} s, p99 0.397 s (n=4)"
    assert labels[1].startswith("c4: p50 0.9 s, p99 ") and labels[1].endswith("(n=5)")
    assert ax.get_xlabel().startswith("TTFT (s)") and ax.get_ylabel() == "share of answered requests"
    assert ax.get_title() == "run x" and ax.get_xscale() == "linear"


def test_ttft_over_twenty_times_is_drawn_on_a_log_axis_and_rates_come_after_streams(tmp_path):
    root = tmp_path / "results"
    rid = load_run(
        root,
        closed(),
        lambda r: load_records(r, {0.5: [0.05, 0.1]}, "open") + load_records(r, {2.0: [1.5, 2.0]}),
    )  # 0.05 to 2 s: 40x
    fig = rp.ttft_distribution(load_results(root).requests([rid]))
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert [t.get_text().split(":")[0] for t in fig.legends[0].get_texts()] == ["c2", "0.5/s"]


def test_without_load_requests_the_distribution_says_so(tmp_path):
    root = tmp_path / "results"
    make_sim_run(root, {"decode_c1": 30.0})  # decode requests only
    data = load_results(root)
    ax = rp.ttft_distribution(data.requests()).axes[0]
    assert not lines_of(ax) and [t.get_text() for t in ax.texts] == ["no load requests"]
    assert ttft_levels(data.requests()) == []
    old_csv = data.requests().drop(columns=["load_loop", "load_level"])  # written before the load workload
    assert ttft_levels(old_csv) == [] and ttft_levels(old_csv.iloc[:0]) == []


def test_report_writes_the_load_plots_only_when_load_runs_exist(tmp_path):
    root = tmp_path / "results"
    make_sim_run(root, {"decode_c1": 30.0})
    before = {p.name for p in rp.plots.save_all(load_results(root), tmp_path / "p1")}
    assert "load.png" not in before and not any(n.startswith("ttft-") for n in before)
    old = load_run(root, closed(0.5), lambda r: load_records(r, TTFTS), run_id="20260101T000000Z-bbbbbb")
    new = load_run(root, closed(), lambda r: load_records(r, TTFTS), run_id="20260102T000000Z-aaaaaa")
    data = load_results(root)
    assert latest_load_runs(data.measures) == [new] and rp.load_runs(data.measures) == [old, new]
    made = {p.name: p for p in rp.plots.save_all(data, tmp_path / "p2")}
    assert set(made) == before | {"load.png", "ttft-sim-spec-none.png"}
    assert all(made[n].read_bytes().startswith(b"\x89PNG") for n in ("load.png", "ttft-sim-spec-none.png"))
    # a newer run with load figures but no requests.csv (imported, say): the TTFT plot stays on `new`
    with ResultsStore(root).new_run(sim_plan(), run_id="20260103T000000Z-cccccc") as run:
        run.finish(RunSummary(measures=closed(2.0), n_ok=4), boot={}, provenance={"harness": "test"})
    data = load_results(root)
    assert latest_load_runs(data.measures) == [run.run_id]
    assert latest_load_runs(data.measures, among=rp.plots.runs_with_requests(data)) == [new]
    rp.plots.save_all(data, tmp_path / "p3")
    assert (tmp_path / "p3" / "ttft-sim-spec-none.png").read_bytes() == made[
        "ttft-sim-spec-none.png"
    ].read_bytes()


def test_the_notebook_figures_add_the_load_plots_for_load_runs(tmp_path):
    root = tmp_path / "results"
    plain = make_sim_run(root, {"decode_c1": 30.0})
    loaded = load_run(root, closed(), lambda r: load_records(r, TTFTS))
    figs = figures(LaneRun(sim_plan(), run_dirs=[plain]), root)
    assert "latency_throughput" not in figs and "ttft_distribution" not in figs
    run_dir = load_results(root).docs[loaded].path
    figs = figures(LaneRun(sim_plan(), run_dirs=[run_dir]), root)
    (line,) = lines_of(figs["latency_throughput"].axes[0])
    assert list(line.get_ydata()) == pytest.approx(P99)
    steps = lines_of(figs["ttft_distribution"].axes[0])
    assert math.isclose(max(steps[0].get_xdata()), 0.4) and steps[0].get_drawstyle() == "steps-post"
