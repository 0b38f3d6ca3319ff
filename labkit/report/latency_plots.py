"""What a request waits and how its answer streams, per lane: TTFT by prompt length (`prefill_<P>_ttft`) and by
context depth (`depth_<D>_ttft<K>`, uncached and cached), and the per-request distributions of TTFT and decode
(empirical CDFs over the stored requests of a lane's newest run). The medians of the other plots hide a lane whose
requests split into fast and slow ones; a CDF shows it.

Pure: the long measures frame or a requests frame in, a matplotlib Figure out (Agg, no pyplot).
"""

from __future__ import annotations

from typing import Any

from labkit.measures import parse_key
from labkit.report.load_plots import log_axis, log_scale
from labkit.report.stats import lane_parts, stat

TTFT_FAMILIES = {  # the panel of each TTFT family: its title and the key axis along x
    "prefill_<P>_ttft": ("TTFT by prompt length (prompt sent alone)", "prompt", "prompt tokens"),
    "depth_<D>_ttft<K>": ("TTFT by context depth", "depth", "tokens of context before the question"),
}


def _figure(**kw: Any) -> Any:
    from matplotlib.figure import Figure

    return Figure(layout="constrained", **kw)


def ttft_points(measures: Any) -> dict[str, dict[str, list[tuple[int, Any]]]]:
    """{family: {series name: [(x, Stat)]}}: a series per lane (and cache state at a depth), x the prompt
    length or the depth, its median TTFT with the min–max across runs."""
    out: dict[str, dict[str, list[tuple[int, Any]]]] = {f: {} for f in TTFT_FAMILIES}
    for name, part in lane_parts(measures, " \u00b7 "):
        for key in sorted(part["measure"].unique()):
            parsed = parse_key(str(key))
            if parsed is None or parsed.family not in TTFT_FAMILIES:
                continue
            axes = dict(parsed.axes)
            x = axes[TTFT_FAMILIES[parsed.family][1]]
            found = stat(part, str(key))
            if found is None or found.median is None or not isinstance(x, int):
                continue
            series = name + (f" ({axes['cache']})" if "cache" in axes else "")
            out[parsed.family].setdefault(series, []).append((x, found))
    return {f: series for f, series in out.items() if series}


def ttft_figure(measures: Any) -> Any | None:
    """A panel per TTFT family the lanes have (by prompt length, by depth): a line per lane with its median
    TTFT and min–max whiskers, a log axis when the TTFTs span more than 20x; None when no lane has either."""
    found = ttft_points(measures)
    if not found:
        return None
    fig = _figure(figsize=(10, 3.6 * len(found)))
    axes = fig.subplots(len(found), 1, squeeze=False)[:, 0]
    for ax, (family, series) in zip(axes, found.items(), strict=True):
        title, _, xlabel = TTFT_FAMILIES[family]
        values = []
        for name, points in sorted(series.items()):
            points.sort(key=lambda p: p[0])
            xs = [x for x, _ in points]
            mids = [s.median for _, s in points]
            lo = [m - (s.lo if s.lo is not None else m) for m, (_, s) in zip(mids, points, strict=True)]
            hi = [(s.hi if s.hi is not None else m) - m for m, (_, s) in zip(mids, points, strict=True)]
            ax.errorbar(xs, mids, yerr=[lo, hi], marker="o", ms=4, capsize=3, lw=1, label=name)
            values += mids
        if log_scale(values):
            ax.set_yscale("log")
            log_axis(ax.yaxis)
        ax.set_title(title + " (median, min\u2013max over runs)", fontsize=9, loc="left")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("TTFT (s)", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=6, frameon=False)
    return fig


def _cdf(ax: Any, values: list[float], label: str) -> None:
    xs = sorted(values)
    ys = [(i + 1) / len(xs) for i in range(len(xs))]
    ax.step(xs, ys, where="post", lw=1.2, label=f"{label} (n={len(xs)})")


def request_distributions(requests: Any, names: dict[str, str]) -> Any | None:
    """Two panels, a CDF per run of `names` ({run id: lane name}): its ok requests' TTFT, and its decode
    requests' decode t/s (burst-read ones left out, as the summary leaves them out); None without requests."""
    if not len(requests):
        return None
    ok = requests[requests["ok"].astype(bool)]
    fig = _figure(figsize=(10, 6.4))
    top, bottom = fig.subplots(2, 1)
    ttfts: list[float] = []
    decodes: list[float] = []
    for rid, name in names.items():
        mine = ok[ok["run"] == rid]
        ttft = [float(v) for v in mine["ttft_s"].dropna()]
        if ttft:
            _cdf(top, ttft, name)
            ttfts += ttft
        dec = mine[(mine["phase"] == "decode") & ~mine["flags"].fillna("").str.contains("burst")]
        rates = [float(v) for v in dec["decode_tps"].dropna()]
        if rates:
            _cdf(bottom, rates, name)
            decodes += rates
    for ax, values in ((top, ttfts), (bottom, decodes)):
        if log_scale(values):  # lanes far apart (a CPU lane beside the lab's): each readable
            ax.set_xscale("log")
            log_axis(ax.xaxis)
    for ax, title, xlabel in (
        (top, "TTFT per request, every phase", "TTFT (s)"),
        (bottom, "decode per request (decode turns; burst-read ones left out)", "decode (t/s)"),
    ):
        ax.set_title(title + " \u2014 share of requests at or below", fontsize=9, loc="left")
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylim(0, 1.02)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=6, frameon=False)
        else:
            ax.text(0.5, 0.5, "no requests", ha="center", va="center", transform=ax.transAxes)
    return fig
