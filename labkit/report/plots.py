"""Plots of stored runs (matplotlib Figures rendered with Agg, no pyplot): PNGs next to the tables, and figures for notebooks.

Five views: per measure, a row per lane with its median as a dot and min–max whiskers (a log axis when the lanes
span more than 10x); tokens over time per stream of a run (from requests.csv); prefill t/s by prompt length; each
node's power and SM clock over a run (its telemetry CSVs); a sweep's measures against its first axis
(docs/sweeps.md, "The sweep table and plot"). Recorded ranges without a median are drawn as a thick segment with
no dot, so a range is never passed off as a measured median. Layout is matplotlib's constrained engine, so no text
box overlaps another (tests/report/test_plot_layout.py checks every plot). Measure titles, units and the headline
set come from the catalogue (docs/measurement.md, "The measure catalogue").
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from labkit.measures import RATE, axis_values, headline, level_key, level_values, measure_key, order_key, unit
from labkit.measures import label as measure_label
from labkit.report import pareto
from labkit.report.latency_plots import request_distributions, ttft_figure
from labkit.report.load_plots import (
    latency_throughput,
    latest_load_runs,
    load_runs,
    log_axis,
    ttft_distribution,
    ttft_levels,
)
from labkit.report.stats import lane_parts, prefill_points, run_stats, run_values, stat
from labkit.report.sweep import MEASURED, axis_header, point_rows, sweep_title, value_text

# the lab note's four figures; its prompts go by their nicknames (~4K, 12.6K)
BAR_MEASURES = (
    ("decode_c1", measure_label("decode_c1")),
    ("decode_c2_agg", measure_label("decode_c2_agg")),
    ("prefill_4096", f"prefill ~4K ({unit('prefill_4096')})"),
    ("prefill_12600", f"prefill 12.6K ({unit('prefill_12600')})"),
)
# PNG metadata without the matplotlib version, so an unchanged plot is byte-identical across versions.
PNG_META = {"Software": None}  # no matplotlib version in the file: same figure, same bytes


def _figure(**kw: Any) -> Any:
    """A bare Figure (no pyplot): nothing global, no GUI backend, and ~1 s less import time. Notebooks show it
    with display(fig)."""
    from matplotlib.figure import Figure

    return Figure(**kw)


LANE_SPAN = 10.0  # a panel whose lanes' figures span more than this factor gets a log axis
KINDS = {  # how each kind of lane figure is drawn in measure_bars: (marker, face colour, legend label)
    "measured": ("o", "#4c78a8", "measured (median, min\u2013max over runs)"),
    "simulated": ("o", "white", "simulated (median, min\u2013max)"),
    "recorded": ("D", "#e45756", "recorded in the lab note"),
}
RANGE_COLOR = "#e45756"  # a recorded range without a median: a thick segment, never a dot


def _kind(part: Any) -> str:
    if (part["source"] == "recorded").all():
        return "recorded"
    return "simulated" if bool(part["simulated"].any()) else "measured"


def measure_bars(measures: Any, keys: tuple[tuple[str, str], ...] = BAR_MEASURES) -> Any:
    """One panel per measure, a row per lane: its median as a dot with a min\u2013max whisker across runs, a
    recorded range without a median as a thick segment (no dot: no median exists). A panel whose figures span more
    than LANE_SPAN (a CPU lane at 30,000 t/s beside 50 t/s lanes) gets a log axis and says so."""
    found = [(name, part, _kind(part)) for name, part in lane_parts(measures, " \u00b7 ")]
    keys = tuple(k for k in keys if len(measures) and (measures["measure"] == k[0]).any()) or keys[:1]
    rows = {
        key: [(n, st, kind) for n, part, kind in found if (st := stat(part, key)) is not None]
        for key, _ in keys
    }
    heights = [0.9 + 0.24 * max(len(r), 1) for r in rows.values()]
    fig = _figure(figsize=(9, sum(heights) + 0.5), layout="constrained")
    axes = fig.subplots(len(keys), 1, squeeze=False, gridspec_kw={"height_ratios": heights})
    drawn: set[str] = set()
    for ax, (key, title) in zip(axes[:, 0], keys, strict=True):
        lanes = rows[key]
        values = [v for _, st, _ in lanes for v in (st.median, st.lo, st.hi) if v is not None and v > 0]
        log = bool(values) and max(values) / min(values) > LANE_SPAN
        for y, (_, st, kind) in enumerate(lanes):
            if st.median is None:
                if st.lo is not None and st.hi is not None:
                    ax.plot([st.lo, st.hi], [y, y], color=RANGE_COLOR, lw=5, solid_capstyle="butt")
                    drawn.add("range")
                continue
            marker, face, _ = KINDS[kind]
            mid = st.median
            lo, hi = (st.lo if st.lo is not None else mid), (st.hi if st.hi is not None else mid)
            color = RANGE_COLOR if kind == "recorded" else "#4c78a8"
            ax.errorbar(
                mid, y, xerr=[[mid - lo], [hi - mid]], fmt=marker, color=color, mfc=face, ms=5, capsize=3
            )
            drawn.add(kind)
        ax.set_yticks(range(len(lanes)), [_short(name) for name, _, _ in lanes], fontsize=7)
        ax.set_ylim(max(len(lanes), 1) - 0.5, -0.5)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(axis="x", alpha=0.3)
        if log:
            ax.set_xscale("log")
            log_axis(ax.xaxis)
        ax.set_title(title + (" \u2014 log scale" if log else ""), fontsize=9, loc="left")
        if not lanes:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    _kind_legend(fig, drawn)
    return fig


def _short(name: str, most: int = 60) -> str:
    """A lane's one-line name, cut to `most` characters (the tables name it in full)."""
    return name if len(name) <= most else name[: most - 1] + "\u2026"


def _kind_legend(fig: Any, drawn: set[str]) -> None:
    """One legend for the figure: which marks are measured, simulated, recorded, or a recorded range."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D(
            [], [], marker=m, color="#4c78a8" if k != "recorded" else RANGE_COLOR, mfc=face, ls="", label=text
        )
        for k, (m, face, text) in KINDS.items()
        if k in drawn
    ]
    if "range" in drawn:
        handles.append(Line2D([], [], color=RANGE_COLOR, lw=5, label="recorded range, no median"))
    if handles:
        fig.legend(
            handles=handles, loc="outside lower center", ncols=min(len(handles), 4), fontsize=7, frameon=False
        )


def tokens_over_time(requests: Any, title: str = "") -> Any:
    """Cumulative output tokens per stream against seconds since the group's first send.

    Uses per-chunk arrival data when the run stored it (columns chunk_t / chunk_tokens as JSON or
    ';'-separated lists; Results.requests reads them from the chunk file of a run schema >= 2); otherwise draws each stream from (t_first, n_first) to (t_last, N), which
    shows the decode slope but not its wobble — the axis label says which.
    """
    fig = _figure(figsize=(8, 3.5))
    ax = fig.subplots()
    df = requests
    if len(df) and "phase" in df.columns:
        df = df[(df["phase"] == "decode") & (df["ok"].astype(str).str.lower() == "true")]
    counts = "chunk_n" if "chunk_n" in df.columns else "chunk_tokens"
    per_chunk = "chunk_t" in df.columns and counts in df.columns
    drawn = 0
    for _, r in df.iterrows():
        try:
            t0 = float(r["t_send"])
            if per_chunk and isinstance(r["chunk_t"], str) and r["chunk_t"] not in ("", "[]"):
                ts = [(float(t) - t0) / 1e9 for t in _list(r["chunk_t"])]
                toks = [float(n) for n in _list(r[counts])] or [1.0] * len(ts)
                cum, ys = 0.0, []
                for n in toks:
                    cum += n
                    ys.append(cum)
            else:
                first, last = float(r["t_first"]), float(r["t_last"])
                n_first = float(r["n_first"]) if not _nan(r.get("n_first")) else 1.0
                ts, ys = [(first - t0) / 1e9, (last - t0) / 1e9], [n_first, float(r["output_tokens"])]
        except (TypeError, ValueError, KeyError):
            continue
        if any(math.isnan(v) for v in ts + ys):
            continue
        ax.plot(
            ts,
            ys,
            lw=1,
            label=f"c{r.get('concurrency', '?')} turn {r.get('turn', '?')} stream {r.get('stream', '?')}",
        )
        drawn += 1
    ax.set_xlabel(
        "seconds since the request was sent" + ("" if per_chunk else " (first and last token only)")
    )
    ax.set_ylabel("output tokens")
    ax.set_title(title or "tokens over time per stream", fontsize=9)
    if drawn and drawn <= 12:
        ax.legend(fontsize=6)
    if not drawn:
        ax.text(0.5, 0.5, "no per-request data", ha="center", va="center", transform=ax.transAxes)
    fig.subplots_adjust(left=0.09, right=0.98, top=0.92, bottom=0.14)
    return fig


def _list(cell: Any) -> list[Any]:
    """A per-chunk list cell: JSON ("[1,2]") as the store writes it, or ';'-separated."""
    text = str(cell).strip()
    if text.startswith("["):
        return list(json.loads(text))
    return [x for x in text.split(";") if x]


def _nan(v: Any) -> bool:
    try:
        return v is None or math.isnan(float(v))
    except (TypeError, ValueError):
        return True


def prefill_by_length(measures: Any) -> Any:
    """Prefill t/s (median, min–max whiskers) against prompt length, one line per lane; a log axis when the lanes
    span more than LANE_SPAN."""
    fig = _figure(figsize=(10, 4), layout="constrained")
    ax = fig.subplots()
    by_lane: dict[str, list[Any]] = {}
    for name, length, st in prefill_points(measures):
        by_lane.setdefault(name, []).append((length, st))
    for name, points in by_lane.items():
        points.sort(key=lambda p: p[0])
        xs = [p[0] for p in points]
        mids = [s.median if s.median is not None else ((s.lo + s.hi) / 2) for _, s in points]
        err = [
            [m - s.lo for m, (_, s) in zip(mids, points, strict=True)],
            [s.hi - m for m, (_, s) in zip(mids, points, strict=True)],
        ]
        ax.errorbar(xs, mids, yerr=err, marker="o", capsize=3, lw=1, label=name.replace("\n", " "))
    values = [v for points in by_lane.values() for _, st in points for v in (st.lo, st.hi) if v and v > 0]
    log = bool(values) and max(values) / min(values) > LANE_SPAN
    if log:
        ax.set_yscale("log")
        log_axis(ax.yaxis)
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel(f"prefill {RATE}")
    ax.set_title(
        f"prefill {RATE} by prompt length (median, min\u2013max)" + (" \u2014 log scale" if log else ""),
        fontsize=9,
    )
    if by_lane:
        fig.legend(loc="outside right upper", fontsize=6, frameon=False)
    else:
        ax.text(0.5, 0.5, "no prefill data", ha="center", va="center", transform=ax.transAxes)
    return fig


def latest_runs_with_requests(results: Any, limit: int = 4) -> list[str]:
    """The newest run with a requests.csv per lane (at most `limit` lanes), for the per-stream plot."""
    runs = results.runs
    if not len(runs):
        return []
    runs = runs[(runs["status"] == "complete") & (runs["n_requests"].fillna(0) > 0)]
    picked = []
    for _, part in runs.sort_values("run").groupby(["recipe", "variant"], sort=True):
        picked.append(part.iloc[-1]["run"])
    return picked[:limit]


def runs_with_requests(results: Any) -> list[str]:
    """The complete runs whose requests.csv holds rows: those a per-request plot can be drawn from."""
    runs = results.runs
    if not len(runs):
        return []
    return [
        str(r) for r in runs.loc[(runs["status"] == "complete") & (runs["n_requests"].fillna(0) > 0), "run"]
    ]


def _sweep_points(records: Any) -> set[tuple[str, str]]:
    """(recipe, variant id) of every point of these sweep records."""
    return {(r.recipe, p.variant_id) for r in records for p in r.points}


def _without(measures: Any, points: set[tuple[str, str]]) -> Any:
    """The measures frame less the lanes that are sweep points: a sweep's points are drawn in its own plot, not
    as lanes beside the others."""
    m = measures
    return m[[lane not in points for lane in zip(m["recipe"], m["variant"], strict=True)]] if len(m) else m


def _records(results: Any) -> list[Any]:
    from labkit.store import load_sweeps

    root = getattr(results, "root", None)
    return load_sweeps(root) if root is not None else []


def report_figures(results: Any) -> dict[str, Any]:
    """{file name: figure} of every plot `labkit report` draws: measures.png, prefill.png (sweep points left to
    their own plot), tokens-<recipe>-<variant>.png per lane's newest run with requests, ttft.png (TTFT by prompt
    length and by depth) and distributions.png (per-request TTFT and decode CDFs of each lane's newest run,
    latency_plots.py), with load levels load.png
    (latency against throughput) and ttft-<recipe>-<variant>.png (TTFT per level of the lane's newest load run),
    and sweep-<recipe>-<name>.png per sweep record under the results' root."""
    records = _records(results)
    points = _sweep_points(records)
    m = results.measures
    lanes = _without(m, points)
    figs = {"measures.png": measure_bars(lanes), "prefill.png": prefill_by_length(lanes)}
    for rid in latest_runs_with_requests(results):
        doc = results.docs[rid]
        if (doc.recipe, doc.variant_id) not in points:
            figs[f"tokens-{doc.recipe}-{doc.variant_id}.png"] = tokens_over_time(
                results.requests([rid]), f"{doc.label} \u2014 {rid}"
            )
    ttft = ttft_figure(lanes)
    if ttft is not None:
        figs["ttft.png"] = ttft
    newest = [
        rid
        for rid in latest_runs_with_requests(results, limit=8)
        if (results.docs[rid].recipe, results.docs[rid].variant_id) not in points
    ]
    if newest:
        names = {rid: f"{results.docs[rid].label} \u00b7 {results.docs[rid].variant_id}" for rid in newest}
        dist = request_distributions(results.requests(newest, chunks=False), names)
        if dist is not None:
            figs["distributions.png"] = dist
    if load_runs(m):
        figs["load.png"] = latency_throughput(m)
    for rid in latest_load_runs(m, among=runs_with_requests(results)):
        doc, requests = results.docs[rid], results.requests([rid], chunks=False)  # TTFTs need no chunk
        if ttft_levels(requests):
            title = f"TTFT per load level: {doc.label} \u2014 {rid}"
            figs[f"ttft-{doc.recipe}-{doc.variant_id}.png"] = ttft_distribution(requests, title)
    for record in records:
        figs[sweep_plot_path(".", record).name] = sweep_figure(record, results)
    return figs


def table_figures(results: Any, specs: Sequence[Any]) -> dict[str, Any]:
    """{table-<id>.png: figure} for each lane table of tables.toml with number rows: its columns' lanes, a panel
    per number row, drawn as measures.png draws them (so the note's tables each have their picture)."""
    from labkit.report.tables import expand_rows, lane_groups

    out = {}
    lanes_only = _without(results.measures, _sweep_points(_records(results)))
    for spec in specs:
        if spec.axis or spec.is_sweep or not len(results.measures):
            continue
        rows_of = results.measures if spec.sweep_points else lanes_only
        parts = [part for _, part in lane_groups(rows_of, spec) if len(part)]
        if not parts:
            continue
        import pandas as pd

        lanes = pd.concat(parts, ignore_index=True)
        rows = [r for r in expand_rows(spec.rows, lanes) if r.format == "number" and r.measure]
        keys = tuple((r.measure, r.label) for r in rows if (lanes["measure"] == r.measure).any())
        if keys:
            fig = measure_bars(lanes, keys)
            fig.suptitle(spec.title, fontsize=10, x=0.01, ha="left")
            out[f"table-{spec.id}.png"] = fig
    return out


def save_all(results: Any, folder: str | Path, specs: Sequence[Any] = ()) -> list[Path]:
    """Every plot of `report_figures`, and one per lane table of `specs` (table_figures), as a PNG in `folder`;
    returns the paths written."""
    figs = {**report_figures(results), **table_figures(results, specs)}
    return [save_png(fig, Path(folder) / name) for name, fig in figs.items()]


def save_png(fig: Any, path: str | Path) -> Path:
    """A figure as the PNG `labkit report` writes (100 dpi, no matplotlib version, so same figure, same bytes)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=100, metadata=PNG_META)
    return path


def sweep_plot_path(folder: str | Path, record: Any) -> Path:
    """Where a sweep's plot lives in a plots folder: sweep-<recipe>-<name>.png."""
    return Path(folder) / f"sweep-{record.recipe}-{record.name}.png"


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except (TypeError, ValueError):  # "[N/A]", "[Not Supported]", empty
        return None


def node_series(csvs: dict[str, str], title: str = "") -> Any:
    """Per node, GPU power and SM clock over the run (the nodes' telemetry CSVs, docs/measurement.md, "Node
    telemetry"), drawn beside the tokens-over-time plot so a slow window can be laid against its node. Nodes
    without GPU samples show MemAvailable instead, so the figure is never empty where memory was sampled."""
    from labkit.store import telemetry_rows

    fig = _figure(figsize=(8, 4.5))
    power, clock = fig.subplots(2, 1, sharex=True)
    drawn = 0
    for node, text in sorted(csvs.items()):
        rows = telemetry_rows(text)
        gpu = [r for r in rows if r.get("source") == "nvidia-smi" and _num(r.get("t_ns")) is not None]
        if gpu:
            ts = [float(r["t_ns"]) / 1e9 for r in gpu]
            for ax, key in ((power, "power_w"), (clock, "sm_clock_mhz")):
                pts = [(t, _num(r.get(key))) for t, r in zip(ts, gpu, strict=True)]
                ax.plot(
                    [t for t, v in pts if v is not None],
                    [v for _, v in pts if v is not None],
                    lw=1,
                    label=node,
                )
            drawn += 1
            continue
        mem = [
            r for r in rows if r.get("source") == "meminfo" and _num(r.get("mem_available_kb")) is not None
        ]
        if mem:
            ts = [float(r["t_ns"]) / 1e9 for r in mem]
            power.plot(
                ts,
                [float(r["mem_available_kb"]) / 2**20 for r in mem],
                lw=1,
                ls="--",
                label=f"{node} (no GPU)",
            )
            drawn += 1
    power.set_ylabel("power (W)\nor MemAvailable (GiB, dashed)", fontsize=8)
    clock.set_ylabel("SM clock (MHz)", fontsize=8)
    clock.set_xlabel("seconds since the run started (labkit's clock)")
    power.set_title(title or "node telemetry", fontsize=9)
    if drawn:
        power.legend(fontsize=6)
    else:
        power.text(0.5, 0.5, "no node telemetry", ha="center", va="center", transform=power.transAxes)
    fig.subplots_adjust(left=0.12, right=0.98, top=0.93, bottom=0.11, hspace=0.12)
    return fig


# the prefill-under-decode figures a sweep plot shows when its points have them: the two sides of the trade-off
# (the arrival's TTFT, the running streams' longest gap) and the decode time each arrival took from the streams
SWEEP_INTERFERENCE = ("interference_<P>_ttft", "interference_<P>_gap_max", "interference_<P>_stall")
# (x, y) of each trade-off plane: the streams' cost across, the arriving prompt's up
TRADE_OFF = ("interference_<P>_gap_max", "interference_<P>_ttft")


def sweep_measures(present: Any) -> list[str]:
    """The measures among `present` a sweep plot shows by default: the headline rates (decode_c1, then
    decode_c<N>_agg and prefill_<P> by N and P), then the prefill-under-decode figures by prompt length."""
    keys = set(present)
    lengths = axis_values(keys, SWEEP_INTERFERENCE[0], "prompt")
    arriving = [measure_key(f, prompt=n) for n in lengths for f in SWEEP_INTERFERENCE]
    return sorted(headline(keys, rates_only=True), key=order_key) + [k for k in arriving if k in keys]


def trade_off_planes(present: Any) -> list[tuple[str, str]]:
    """(x, y) keys of each trade-off plane the points have both of: one per arriving prompt length."""
    keys = set(present)
    planes = [
        tuple(measure_key(f, prompt=n) for f in TRADE_OFF) for n in axis_values(keys, TRADE_OFF[1], "prompt")
    ]
    return [(x, y) for x, y in planes if x in keys and y in keys]


def _swept(record: Any, point: Any) -> str:
    """A point's swept values, as a marker's label: "4096" or "4096, fast"."""
    return ", ".join(value_text(point.values.get(a.short)) for a in record.axes)


def trade_off_costs(record: Any, parts: list[Any], x_key: str, y_key: str) -> list[pareto.Cost]:
    """One Cost per measured point with both figures, labelled with its swept values."""
    out = []
    for p, part in zip(record.points, parts, strict=True):
        if p.status not in MEASURED:
            continue
        x, y = sweep_point(part, x_key), sweep_point(part, y_key)
        if x is None or y is None:
            continue
        out.append(pareto.Cost(_swept(record, p), x[0], y[0], x[1], y[1]))
    return out


def sweep_point(part: Any, key: str) -> tuple[float, float, float] | None:
    """(mean, low, high) of one point's run values: the 95 % Student-t interval from at least 3 runs, else
    the min–max range (one run: low = high = the value); None without a value."""
    values = run_values(part, key)
    if not values:
        return None
    rs = run_stats(values)
    assert rs.mean is not None  # values is not empty
    if rs.lo is not None and rs.hi is not None:
        return (rs.mean, rs.lo, rs.hi)
    return (rs.mean, min(values), max(values))


def sweep_series(
    record: Any, parts: list[Any], key: str
) -> tuple[dict[str, list[tuple[float, ...]]], list[float], dict[str, float]]:
    """({line label: [(x, mean, low, high)]}, x of each failed point, {first-axis value: x}) of one measure:
    x is the first axis's value when all its values are numbers, else its position; a line per combination
    of the other axes' values ("mean over runs" for a one-axis sweep)."""
    first, rest = record.axes[0], record.axes[1:]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in first.values)
    pos = {value_text(v): (float(v) if numeric else float(i)) for i, v in enumerate(first.values)}
    lines: dict[str, list[tuple[float, ...]]] = {}
    failed = []
    for p, part in zip(record.points, parts, strict=True):
        x = pos.get(value_text(p.values.get(first.short)))
        label = ", ".join(f"{a.short}={value_text(p.values.get(a.short))}" for a in rest) or "mean over runs"
        if x is not None and p.status == "failed":
            failed.append(x)
        elif x is not None and p.status in ("measured", "resumed") and (got := sweep_point(part, key)):
            lines.setdefault(label, []).append((x, *got))
    return {label: sorted(pts) for label, pts in lines.items()}, failed, pos


def lane_gpus(data: Any, runs: Sequence[str]) -> int | None:
    """The GPUs of the lane a point's runs ran on (its plan's nodes x GPUs per node), None when unknown."""
    docs = getattr(data, "docs", {})
    for run in runs:
        doc = docs.get(run)
        cluster = doc.plan.resolved.get("cluster") if doc is not None else None
        if isinstance(cluster, dict) and cluster.get("nodes"):
            return len(cluster["nodes"]) * int(cluster.get("gpus_per_node") or 1)
    return None


def rate_costs(record: Any, parts: list[Any], data: Any) -> list[pareto.Cost]:
    """vLLM's view of a sweep (`vllm bench sweep plot_pareto`): per measured point and closed-loop level of N
    streams, output tokens/s per user (the level's output rate / N) against per GPU (/ the lane's GPUs), as
    negated costs with the high end of each interval as the best."""
    out = []
    for p, part in zip(record.points, parts, strict=True):
        gpus = lane_gpus(data, list(p.runs))
        if p.status not in MEASURED or not gpus:
            continue
        present = set(part["measure"])
        for axis, n in level_values(present, "load_output_tps"):
            got = sweep_point(part, level_key("load_output_tps", axis, n)) if axis == "load" else None
            if got is None:
                continue
            mean, _, high = got
            out.append(
                pareto.Cost(
                    f"{_swept(record, p)}, c{n}",
                    -mean / gpus,
                    -mean / float(n),
                    -high / gpus,
                    -high / float(n),
                )
            )
    return out


def sweep_figure(record: Any, data: Any, measures: list[str] | None = None) -> Any:
    """One subplot per measure (default: the headline ones present) against the first axis, one line per
    combination of the other axes: the mean of a point's runs with a 95 % interval (3+ runs) or min–max
    whiskers, failed points an "x" at the bottom. docs/sweeps.md, "The sweep table and plot"."""
    frame = getattr(data, "measures", data)  # Results or its measures frame
    parts = [point_rows(record, p, frame) for p in record.points]
    shown = [
        part for p, part in zip(record.points, parts, strict=True) if p.status in ("measured", "resumed")
    ]
    present = {m for part in shown for m in part["measure"]}
    keys = list(measures or sweep_measures(present) or ["decode_c1"])
    planes = [] if measures else trade_off_planes(present)
    rates = [] if measures else rate_costs(record, parts, data)
    panels = len(keys) + len(planes) + bool(rates)
    fig = _figure(figsize=(8, 2.6 * panels + 0.4), layout="constrained")
    axes = fig.subplots(panels, 1, squeeze=False)[:, 0]
    if rates:
        title = "vLLM's view: output tokens/s per user against per GPU, one marker per point and level"
        pareto.draw(
            axes[-1], rates, title, ("output tokens/s per GPU", "output tokens/s per user"), gains=True
        )
    for ax, (x_key, y_key) in zip(axes[len(keys) : len(keys) + len(planes)], planes, strict=True):
        tokens = axis_values([y_key], TRADE_OFF[1], "prompt")[0]
        title = f"the trade-off: {tokens:,}-token prompts arriving under decode, one marker per point"
        labels = ("longest gap of a running stream during the prefill (s)", "arrival TTFT (s)")
        pareto.draw(ax, trade_off_costs(record, parts, x_key, y_key), title, labels)
    for ax, key in zip(axes[: len(keys)], keys, strict=True):
        lines, failed, pos = sweep_series(record, parts, key)
        for label, pts in lines.items():
            xs, ys, los, his = zip(*pts, strict=True)
            (line,) = ax.plot(xs, ys, marker="o", lw=1, label=label)
            bars = [(x, y, y - lo, hi - y) for x, y, lo, hi in pts if hi > lo]
            if bars:
                bx, by, down, up = zip(*bars, strict=True)
                ax.errorbar(bx, by, yerr=[down, up], fmt="none", ecolor=line.get_color(), capsize=3, lw=1)
        if failed:  # x in data, y in axes coordinates: at the bottom whatever the scale
            ax.plot(failed, [0.03] * len(failed), "x", color="#c0392b", ms=8, mew=2, label="failed",
                    transform=ax.get_xaxis_transform(), clip_on=False)  # fmt: skip
        ax.set_xticks(list(pos.values()), list(pos), fontsize=7)
        ax.set_xlabel(axis_header(record.axes[0]), fontsize=8)
        ax.set_title(measure_label(key), fontsize=9)  # 'decode c2 aggregate (t/s)'
        _no_jitter_zoom(ax, [y for pts in lines.values() for _, y, _, _ in pts])
        if lines or failed:
            ax.legend(fontsize=6)
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(sweep_title(record, any(bool(part["simulated"].any()) for part in shown)), fontsize=9)
    return fig


SWEEP_MIN_SPAN = 0.05  # a sweep panel's y axis spans at least this share of its values' middle


def _no_jitter_zoom(ax: Any, ys: list[float]) -> None:
    """Plain tick labels (no "+2.97e1" offset), and a y axis at least SWEEP_MIN_SPAN of the values wide around
    their middle: a spread of a few thousandths would otherwise fill the panel and read as a trend."""
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    if not ys:
        return
    lo, hi = ax.get_ylim()
    mid = (min(ys) + max(ys)) / 2
    half = abs(mid) * SWEEP_MIN_SPAN / 2
    if hi - lo < 2 * half:
        ax.set_ylim(mid - half, mid + half)
