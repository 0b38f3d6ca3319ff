"""Node telemetry, per window: a run's measurement windows from its records (decode per repetition, prefill
per target length), and each node's samples over a window: energy (trapezoid over power), mean power, SM
clock, temperature, utilization, clock reasons, minimum MemAvailable; the window's energy per token when the
samples cover it (docs/measurement.md, "Node telemetry"). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from labkit.measure.records import RequestRecord
from labkit.measure.request.timing import NS, median
from labkit.measure.telemetry.series import LIMIT_REASONS, GpuSample, MemSample, NodeSeries, reason_names

Sample = TypeVar("Sample", GpuSample, MemSample)


def integrate(points: Sequence[tuple[int, float]], a: int, b: int) -> tuple[float, int]:
    """(joules, covered ns) of power over [a, b]: the trapezoid rule over the samples, the power at a and b
    interpolated between their neighbours; the part of [a, b] outside the samples' span is not covered."""
    pts = sorted(points)
    lo, hi = max(a, pts[0][0]) if pts else a, min(b, pts[-1][0]) if pts else a
    if hi <= lo:
        return 0.0, 0

    def at(t: int) -> float:
        for (t0, p0), (t1, p1) in zip(pts, pts[1:], strict=False):
            if t0 <= t <= t1:
                return p0 if t1 == t0 else p0 + (p1 - p0) * (t - t0) / (t1 - t0)
        return pts[-1][1]

    knots = [(lo, at(lo))] + [(t, p) for t, p in pts if lo < t < hi] + [(hi, at(hi))]
    joules = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(knots, knots[1:], strict=False))
    return joules / NS, hi - lo


@dataclass(frozen=True)
class Window:
    """A measurement window: its intervals (ns from the origin) and the tokens produced inside them."""

    name: str
    intervals: tuple[tuple[int, int], ...]
    tokens: int
    token_kind: str  # "output" (decode) or "prompt" (prefill: prompt tokens computed, P - cached)


def run_windows(
    records: Sequence[RequestRecord], targets: Sequence[int], excluded: Sequence[str] = ()
) -> list[Window]:
    """`decode`: from the first decode request's t_send to the last one's t_end, per repetition, with the
    output tokens of every request inside; `prefill_<P>`: each measured sample's t_send..t_end, without the
    samples whose flags are in `excluded`, with their prompt tokens."""
    ok = [r for r in records if r.ok and r.t_end is not None]
    spans: list[tuple[int, int]] = []
    for rep in sorted({r.rep for r in ok if r.phase == "decode"}):
        dec = [r for r in ok if r.phase == "decode" and r.rep == rep]
        spans.append((min(r.t_send for r in dec), max(ended(r) for r in dec)))
    inside = [
        r for r in ok if r.phase != "prefill" and any(a <= r.t_send and ended(r) <= b for a, b in spans)
    ]
    out = []
    if spans:
        out.append(Window("decode", tuple(spans), sum(r.output_tokens or 0 for r in inside), "output"))
    for p in targets:
        pre = [r for r in ok if r.phase == "prefill" and r.prompt_target == p]
        pre = [r for r in pre if not any(f in r.flags for f in excluded)]
        if pre:
            tokens = sum((r.prompt_tokens or 0) - (r.cached_tokens or 0) for r in pre)
            out.append(Window(f"prefill_{p}", tuple((r.t_send, ended(r)) for r in pre), tokens, "prompt"))
    return out


def ended(r: RequestRecord) -> int:
    """A record's t_end where run_windows kept only the records that have one."""
    assert r.t_end is not None
    return r.t_end


def node_window(s: NodeSeries, w: Window) -> dict[str, Any]:
    """One node over one window: energy and mean power, SM clock, temperature, utilization, clock reasons,
    minimum MemAvailable. Keys without a sample behind them are left out, never 0."""

    gpu: list[GpuSample] = []
    borrowed = 0
    for index in sorted({g.gpu for g in s.gpu}, key=lambda i: -1 if i is None else i):
        part, n = in_window([g for g in s.gpu if g.gpu == index], w.intervals)
        gpu, borrowed = gpu + part, borrowed + n
    mem = [m.available_kb for m in in_window(s.memory, w.intervals)[0] if m.available_kb is not None]
    out: dict[str, Any] = {}
    if s.gpu:
        out["samples"] = len(gpu)
        if borrowed:
            out["neighbour_samples"] = borrowed
        energy, covered = 0.0, None
        for index in {g.gpu for g in s.gpu}:
            pts = [(g.t, g.power_w) for g in s.gpu if g.gpu == index and g.power_w is not None]
            parts = [integrate(pts, a, b) for a, b in w.intervals]
            energy += sum(j for j, _ in parts)
            span = sum(c for _, c in parts)
            covered = span if covered is None else min(covered, span)
        if covered:
            out.update(energy_j=energy, covered_s=covered / NS, power_mean_w=energy * NS / covered)
        figures = (
            ("sm_clock_median_mhz", median([g.sm_mhz for g in gpu])),
            ("sm_clock_min_mhz", min((g.sm_mhz for g in gpu if g.sm_mhz is not None), default=None)),
            ("temperature_max_c", max((g.temp_c for g in gpu if g.temp_c is not None), default=None)),
            ("utilization_mean_pct", mean([g.util_pct for g in gpu])),
        )
        out.update({k: v for k, v in figures if v is not None})
        seen = sorted({n for g in gpu for n in reason_names(g.reasons)})
        if any(g.reasons is not None for g in gpu):
            out["clock_reasons"] = seen
            limited = [g for g in gpu if set(reason_names(g.reasons)) & set(LIMIT_REASONS)]
            out["limited_samples"] = len(limited)
    out["memory_samples"] = len(mem)
    if mem:
        out["mem_available_min_bytes"] = min(mem) * 1024
    return out


def in_window(samples: Sequence[Sample], intervals: Sequence[tuple[int, int]]) -> tuple[list[Sample], int]:
    """(the samples a window's figures come from, how many of them lie outside it): those stamped inside an
    interval; for an interval without one (shorter than the period), the last sample before it and the first
    after it, the ones its energy is interpolated from."""
    used: dict[int, Sample] = {}
    borrowed = 0
    for a, b in intervals:
        inside = [x for x in samples if a <= x.t <= b]
        if not inside:
            around = [max((x for x in samples if x.t < a), key=lambda x: x.t, default=None)]
            around.append(min((x for x in samples if x.t > b), key=lambda x: x.t, default=None))
            inside = [x for x in around if x is not None]
            borrowed += sum(id(x) not in used for x in inside)
        used.update((id(x), x) for x in inside)
    return sorted(used.values(), key=lambda x: x.t), borrowed


def mean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def window_summary(series: Mapping[str, NodeSeries], w: Window) -> dict[str, Any]:
    """The window over every node, with the window's energy per token when every node that sampled its GPU
    covered the whole window (docs/measurement.md, "Node telemetry")."""
    seconds = sum(b - a for a, b in w.intervals) / NS
    nodes = {name: node_window(s, w) for name, s in sorted(series.items())}
    out: dict[str, Any] = {"seconds": seconds, "tokens": w.tokens, "token_kind": w.token_kind, "nodes": nodes}
    gpus = [n for name, n in nodes.items() if series[name].gpu]
    if gpus and all(n.get("covered_s", 0) >= seconds * 0.99 for n in gpus):
        out["energy_j"] = sum(n["energy_j"] for n in gpus)
        if w.tokens:
            out["joules_per_token"] = out["energy_j"] / w.tokens
    elif gpus:
        out["note"] = "the GPU samples do not cover the whole window: no energy per token"
    return out
