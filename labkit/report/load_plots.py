"""Plots of load levels: a latency–throughput curve per lane and the TTFT distribution of each level of one run
(docs/measurement.md, "Serving under load").

The curve shows what more throughput costs in latency: x is a level's output tokens/s, y its TTFT p99 (top
panel) and p50 (bottom), each the median over the lane's runs, each point named by its level (c4: four
closed-loop streams; 0.5/s: an open loop's rate). Closed and open loops are separate lines, as their levels mean
different things. A percentile hides the shape of its distribution, so the second plot draws, per level, the
share of answered requests with a TTFT at or below x (an ECDF, from requests.csv), p50 and p99 marked. A latency
axis goes logarithmic when its values span more than LOG_SPAN times, so the low levels are not a flat line.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from labkit.measures import (
    AXIS,
    LEVEL_AXES,
    LOOP_AXIS,
    RATE,
    AxisValue,
    level_label,
    level_values,
    measure_key,
)
from labkit.report.stats import lane_parts, stat

LOG_SPAN = 20.0  # a latency axis is logarithmic when its largest value is over this many times its smallest
CURVE_STATS = ("p99", "p50")  # the curve's panels, top to bottom
LOOP = {
    "load": "closed loop",
    "rate": "open loop",
    "sessions": "agentic sessions",
}  # a level's axis -> its loop
STYLE = {"load": ("-", "o"), "rate": ("--", "s"), "sessions": (":", "^")}  # a loop's line style and marker


@dataclass(frozen=True)
class LoadPoint:
    """One level of one lane on the curve: medians over the lane's runs (None where no run has the figure)."""

    lane: str
    axis: str  # "load" (closed-loop streams) or "rate" (open-loop requests/s)
    level: AxisValue
    output_tps: float | None
    p50: float | None
    p99: float | None

    @property
    def label(self) -> str:
        return level_label(self.axis, self.level)


def _figure(**kw: Any) -> Any:
    """A bare Figure (no pyplot), as plots.py makes them: nothing global, no GUI backend."""
    from matplotlib.figure import Figure

    return Figure(**kw)


def _levels(keys: Any) -> list[tuple[str, AxisValue]]:
    """(axis, level) of every load level among these keys: closed loops by streams, then rates."""
    return level_values(str(k) for k in keys)


def load_runs(measures: Any) -> list[str]:
    """The runs (in run id order) that stored a load level's measures."""
    if not len(measures):
        return []
    keys = measures["measure"].unique()
    wanted = {str(m) for m in keys if _levels([m])}
    return sorted({str(r) for r in measures.loc[measures["measure"].isin(wanted), "run"]})


def latest_load_runs(measures: Any, among: Collection[str] | None = None, limit: int = 4) -> list[str]:
    """The newest run with load levels per (recipe, variant), at most `limit` lanes: whose TTFT is drawn.
    `among`: only these runs (those with a requests.csv, so an imported run's figures never hide the newest
    run with records)."""
    runs = set(load_runs(measures))
    if among is not None:
        runs &= set(among)
    rows = measures[measures["run"].isin(runs)]
    picked = [str(part["run"].max()) for _, part in rows.groupby(["recipe", "variant"], sort=True)]
    return picked[:limit]


def load_points(measures: Any) -> list[LoadPoint]:
    """Every lane's load levels with their output t/s and TTFT p50/p99 (medians over the lane's runs): the
    curve's data, lane by lane, closed-loop levels before rates."""
    if not len(measures):
        return []
    out = []
    for name, part in lane_parts(measures):
        for axis, level in _levels(part["measure"].unique()):
            out.append(
                LoadPoint(
                    name,
                    axis,
                    level,
                    _median(part, measure_key("load_output_tps", **{axis: level})),
                    _median(part, measure_key("load_ttft", **{axis: level}, stat="p50")),
                    _median(part, measure_key("load_ttft", **{axis: level}, stat="p99")),
                )
            )
    return out


def _median(part: Any, key: str) -> float | None:
    found = stat(part, key)
    return None if found is None else found.median


def log_scale(values: list[float]) -> bool:
    """Whether a latency axis over these values is drawn logarithmic: all positive, spanning over LOG_SPAN."""
    finite = [v for v in values if v is not None and not math.isnan(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > LOG_SPAN


def log_axis(axis: Any) -> None:
    """A logarithmic axis with ticks at 1, 2 and 5 of each decade written as plain numbers: an axis over 20x
    may hold one power of ten or none, and 0.5 reads faster than 5x10^-1."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def latency_throughput(measures: Any) -> Any:
    """TTFT p99 (top) and p50 (bottom) against output t/s, a line per lane and loop, each point named by its
    level; a "no load levels" figure without any."""
    points = load_points(measures)
    series: dict[tuple[str, str], list[LoadPoint]] = {}
    for p in points:
        series.setdefault((p.lane, p.axis), []).append(p)
    lanes = list(dict.fromkeys(p.lane for p in points))
    fig = _figure(figsize=(8, 7))
    axes = fig.subplots(len(CURVE_STATS), 1, sharex=True)
    drawn = False
    for ax, which in zip(axes, CURVE_STATS, strict=True):
        ys_all: list[float] = []
        for (lane, axis), pts in series.items():
            pts = [p for p in pts if p.output_tps is not None and getattr(p, which) is not None]
            if not pts:
                continue
            xs, ys = [p.output_tps for p in pts], [getattr(p, which) for p in pts]
            ls, marker = STYLE[axis]
            ax.plot(xs, ys, color=f"C{lanes.index(lane) % 10}", ls=ls, marker=marker, lw=1.2, ms=5,
                    label=f"{lane}, {LOOP[axis]}")  # fmt: skip
            for x, y, p in zip(xs, ys, pts, strict=True):
                ax.annotate(p.label, (x, y), xytext=(5, -3), textcoords="offset points", fontsize=7)
            ys_all += ys
            drawn = True
        if log_scale(ys_all):
            ax.set_yscale("log")
            log_axis(ax.yaxis)
        ax.set_ylabel(f"TTFT {which} (s)")
        ax.set_title(f"TTFT {which} against output {RATE} (median over runs)", fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        ax.margins(x=0.06)  # room for the last point's level name
    axes[-1].set_xlabel(f"output {RATE} of the level (all its requests)")
    if drawn:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=min(2, len(labels)), fontsize=7, frameon=False)
    else:
        for ax in axes:
            ax.text(0.5, 0.5, "no load levels", ha="center", va="center", transform=ax.transAxes)
    rows = math.ceil(len(series) / 2)
    fig.subplots_adjust(left=0.1, right=0.97, top=0.95, bottom=0.08 + 0.025 * rows, hspace=0.25)
    return fig


def ttft_levels(requests: Any) -> list[tuple[str, AxisValue, list[float]]]:
    """(axis, level, sorted TTFTs in s) per level of the answered load requests, closed loops first; a TTFT is
    t_first − t_send, as the level's percentiles are (docs/measurement.md, "Serving under load")."""
    df = requests
    if not len(df) or not {"phase", "ok", "load_loop", "load_level"} <= set(df.columns):
        return []  # no requests, or a requests.csv from before the load workload
    df = df[(df["phase"] == "load") & (df["ok"].astype(str).str.lower() == "true")]
    out = []
    for (loop, level), part in df.groupby(["load_loop", "load_level"], sort=False):
        axis = LOOP_AXIS.get(str(loop))
        if axis is None:
            continue
        ttfts = [
            (float(f) - float(s)) / 1e9
            for s, f in zip(part["t_send"], part["t_first"], strict=True)
            if not (_missing(s) or _missing(f))
        ]
        if ttfts:
            out.append((axis, AXIS[axis].normal(float(level)), sorted(ttfts)))
    return sorted(out, key=lambda e: (LEVEL_AXES.index(e[0]), float(e[1])))


def _missing(v: Any) -> bool:
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return True


def ttft_distribution(requests: Any, title: str = "") -> Any:
    """Per load level, the share of answered requests with TTFT at or below x (one step line each), its p50
    (dot) and p99 (triangle) marked and given in the legend; a "no load requests" figure without any."""
    import numpy as np

    levels = ttft_levels(requests)
    fig = _figure(figsize=(8, 5))
    ax = fig.subplots()
    values: list[float] = []
    for i, (axis, level, ttfts) in enumerate(levels):
        n = len(ttfts)
        p50, p99 = (float(np.percentile(ttfts, q)) for q in (50, 99))  # linear, as the summary's percentile
        colour = f"C{i % 10}"
        xs, ys = [ttfts[0], *ttfts], [0.0, *((k + 1) / n for k in range(n))]
        ax.step(xs, ys, where="post", color=colour, lw=1.2,
                label=f"{level_label(axis, level)}: p50 {p50:.3g} s, p99 {p99:.3g} s (n={n})")  # fmt: skip
        ax.plot([p50], [0.5], "o", color=colour, ms=5)
        ax.plot([p99], [0.99], "v", color=colour, ms=6)
        values += ttfts
    for share in (0.5, 0.99):
        ax.axhline(share, color="grey", lw=0.6, ls=":")
    if log_scale(values):
        ax.set_xscale("log")
        log_axis(ax.xaxis)
    ax.set_xlabel("TTFT (s), send to the first token-bearing chunk")
    ax.set_ylabel("share of answered requests")
    ax.set_ylim(0, 1.02)
    ax.set_title(title or "TTFT per load level", fontsize=9)
    rows = math.ceil(len(levels) / 2)
    if levels:  # below the axes: an ECDF fills every corner of its own
        fig.legend(*ax.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=7, frameon=False,
                   title="level (\u25cf p50, \u25bc p99)", title_fontsize=7)  # fmt: skip
    else:
        ax.text(0.5, 0.5, "no load requests", ha="center", va="center", transform=ax.transAxes)
    fig.subplots_adjust(left=0.09, right=0.98, top=0.93, bottom=0.12 + 0.032 * (rows + 1) * bool(levels))
    return fig
