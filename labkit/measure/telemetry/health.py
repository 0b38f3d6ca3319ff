"""Node telemetry, the run's summary: every window's figures over every node (energy.py) with the
health marks they raise (`low-clock` against a node's healthy SM-clock baseline, `throttled` when the GPU
reported a thermal or power limit), and the healthy clocks a baseline is updated from (docs/measurement.md,
"Node telemetry"). The samples themselves are parsed in series.py. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from labkit.measure.records import RequestRecord
from labkit.measure.request.timing import median
from labkit.measure.telemetry.energy import run_windows, window_summary
from labkit.measure.telemetry.series import LIMIT_REASONS, TelemetryRun

LOW_CLOCK = "low-clock"  # the flag of a node whose SM clock sat well below its healthy baseline


def health_flags(
    name: str, win: dict[str, Any], baseline: Mapping[str, float] | None, drop: float
) -> list[dict[str, str]]:
    """`low-clock` (a node's SM-clock median more than `drop` below its healthy baseline) and `throttled` (the
    GPU reported a thermal or power limit) for one window summary; each node entry gets its flag codes."""
    out = []
    for node, n in win["nodes"].items():
        codes = n.setdefault("flags", [])
        m, base = n.get("sm_clock_median_mhz"), (baseline or {}).get(node)
        if m is not None and base and m < base * (1 - drop):
            codes.append(LOW_CLOCK)
            message = (
                f"{node}: SM clock median {m:.0f} MHz over {n['samples']} samples is {1 - m / base:.0%} below "
                f"its healthy {base:.0f} MHz (more than the {drop:.0%} allowed)"
            )
            out.append({"code": LOW_CLOCK, "window": name, "message": message})
        limits = [r for r in n.get("clock_reasons", []) if r in LIMIT_REASONS]
        if limits:
            codes.append("throttled")
            message = (
                f"{node}: the GPU reported {', '.join(limits)} in {n['limited_samples']} of {n['samples']} "
                f"samples" + (f" (SM clock median {m:.0f} MHz)" if m is not None else "")
            )
            out.append({"code": "throttled", "window": name, "message": message})
    return out


def summarize_telemetry(
    run: TelemetryRun, records: Sequence[RequestRecord], targets: Sequence[int], excluded: Sequence[str] = ()
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """(summary.telemetry, flags): per-node availability, each window's summary, the health flags."""
    out: dict[str, Any] = {
        "period_ms": run.period_ms,
        "nodes": {n: s.status() for n, s in sorted(run.series.items())},
    }
    flags = []
    for w in run_windows(records, targets, excluded):
        out[w.name] = window_summary(run.series, w)
        flags += health_flags(w.name, out[w.name], run.clock_baseline, run.clock_drop)
    return out, flags


def telemetry_windows(telemetry: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The window entries of a summary.telemetry ("decode", "prefill_<P>"), without "nodes" and "period_ms"."""
    return {k: v for k, v in telemetry.items() if k == "decode" or k.startswith("prefill_")}


def healthy_clocks(telemetry: Mapping[str, Any]) -> dict[str, float]:
    """Per node, the median of its SM-clock medians over the windows that raised no flag on it: what a
    baseline of healthy clocks can be updated from. Nodes without such a window are left out."""
    seen: dict[str, list[float]] = {}
    for win in telemetry_windows(telemetry).values():
        for node, n in win.get("nodes", {}).items():
            if n.get("sm_clock_median_mhz") is not None and not n.get("flags"):
                seen.setdefault(node, []).append(n["sm_clock_median_mhz"])
    # a non-empty list of numbers always has a median: the filter only tells the checker so
    return {node: m for node, v in sorted(seen.items()) if (m := median(v)) is not None}
