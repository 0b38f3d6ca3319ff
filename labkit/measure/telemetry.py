"""Node telemetry, the pure part: a node sampler's output lines into per-node series, the series into
per-window summaries, energy per token and health marks (docs/measurement.md, "Node telemetry").

The sampler (labkit/measure/telemetry_run.py) hands over `(t, line)` pairs, t being labkit's own
`time.perf_counter_ns()` when the line arrived, already made relative to the run's origin like the records'
stamps. A value the tool could not give ("[N/A]", "[Not Supported]") stays None, never 0, and a node without
nvidia-smi says so once in its status instead of carrying empty GPU figures.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from labkit.measure.records import RequestRecord
from labkit.measure.timing import NS, median

# what the sampler asks nvidia-smi for, in this order; the clock-reasons field is added last under the name the
# node's driver accepts (REASONS_FIELDS, newest first)
GPU_QUERY = "timestamp,index,power.draw,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu"
GPU_FIELDS = tuple(GPU_QUERY.split(","))
REASONS_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
# NVML's clock event (throttle) reason bits, as `clocks_*_reasons.active` prints them ("0x0000000000000004")
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# the reasons that mean the GPU hit a thermal or power limit (a `throttled` flag)
LIMIT_REASONS = tuple(REASON_BITS[bit] for bit in (0x4, 0x8, 0x20, 0x40, 0x80))
NOT_AVAILABLE = "not available"
STAMP = re.compile(r"^\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(\.\d+)?$")
CSV_HEADER = (
    "t_ns,source,node_time,gpu,power_w,sm_clock_mhz,mem_clock_mhz,temperature_c,utilization_pct,clock_reasons,"
    "mem_total_kb,mem_available_kb,cached_kb"
)


@dataclass(frozen=True)
class GpuSample:
    """One nvidia-smi row: labkit's stamp `t` (ns from the run origin), the node's own timestamp, the values."""

    t: int
    node_time: str
    gpu: int | None
    power_w: float | None
    sm_mhz: float | None
    mem_mhz: float | None
    temp_c: float | None
    util_pct: float | None
    reasons: int | None
    raw: tuple[str, ...]  # the row's fields as printed


@dataclass(frozen=True)
class MemSample:
    """One /proc/meminfo reading (kB as the kernel prints them, 1 kB = 1024 bytes)."""

    t: int
    node_time: str
    total_kb: int | None
    available_kb: int | None
    cached_kb: int | None


@dataclass
class NodeSeries:
    """Everything one node's sampler said: its samples and whether GPU and memory telemetry were available."""

    node: str
    gpu: list[GpuSample] = field(default_factory=list)
    memory: list[MemSample] = field(default_factory=list)
    gpu_status: str = ""  # "nvidia-smi", or "not available: <reason>"
    memory_status: str = ""  # "/proc/meminfo", or "not available: <reason>"
    reasons_field: str = ""  # the clock-reasons field name the node's nvidia-smi accepted
    gpu_error: str = ""  # nvidia-smi stopped during the run after giving samples

    def status(self) -> dict:
        out = {"gpu": self.gpu_status, "gpu_samples": len(self.gpu), "memory": self.memory_status}
        out["memory_samples"] = len(self.memory)
        if self.gpu:
            out["gpus"] = sorted({s.gpu for s in self.gpu if s.gpu is not None})
            out["reasons_field"] = self.reasons_field
        if self.gpu_error:
            out["gpu_error"] = self.gpu_error
        return out


@dataclass(frozen=True)
class TelemetryRun:
    """What a run's sampler hands the summary: per-node series and the settings of the health marks."""

    series: Mapping[str, NodeSeries]
    period_ms: int
    clock_baseline: Mapping[str, float] | None = None  # healthy SM clock (MHz) per node
    clock_drop: float = 0.10  # a window median more than this fraction below its baseline is `low-clock`


def number(text: str) -> float | None:
    """A value as nvidia-smi prints it ("35.12", "35.12 W", "0x4"), None for "[N/A]", "[Not Supported]"."""
    text = text.strip()
    if not text or text.startswith("[") or text.upper() == "N/A":
        return None
    word = text.split()[0]
    try:
        return float(int(word, 16)) if word.lower().startswith("0x") else float(word)
    except ValueError:
        return None


def parse_gpu_row(text: str, t: int) -> GpuSample | None:
    """One `--format=csv,noheader,nounits` row of GPU_FIELDS plus the reasons field; None if it is not one."""
    raw = tuple(v.strip() for v in text.split(","))
    if len(raw) != len(GPU_FIELDS) + 1 or not STAMP.match(raw[0]):
        return None
    values = [number(v) for v in raw]
    gpu, reasons = values[1], values[-1]
    return GpuSample(
        t,
        raw[0],
        None if gpu is None else int(gpu),
        *values[2:7],
        None if reasons is None else int(reasons),
        raw,
    )


def parse_memory(text: str, t: int) -> MemSample:
    """`M <date> <time> <MemTotal> <MemAvailable> <Cached>` (kB); a missing value is None."""
    words = text.split()[1:]
    node_time = " ".join(words[:2])
    kb = [int(w) if w.isdigit() else None for w in words[2:5]] + [None] * 3
    return MemSample(t, node_time, *kb[:3])


def parse_node(node: str, lines: Sequence[tuple[int, str]], error: str = "") -> NodeSeries:
    """A node's series from its sampler's lines; `error` is why the sampler itself failed (unreachable)."""
    s = NodeSeries(node)
    missing, exit_code, texts, no_memory = "", None, [], ""
    for t, line in lines:
        line = line.rstrip("\r")
        tag = line[:2]
        if tag == "M ":
            s.memory.append(parse_memory(line, t))
        elif tag == "N ":
            missing = line[2:].strip()
        elif tag == "X ":
            exit_code = int(line[2:]) if line[2:].strip().isdigit() else -1
        elif tag == "F ":
            s.reasons_field = line[2:].strip()
        elif tag == "Q ":
            no_memory = line[2:].strip()
        elif (row := parse_gpu_row(line, t)) is not None:
            s.gpu.append(row)
        elif line.strip():
            texts.append(line.strip())
    detail = (
        texts[0] if texts else (f"nvidia-smi exited with status {exit_code}" if exit_code is not None else "")
    )
    if missing or not s.gpu:
        reason = missing or error or detail or "no sample received"
        s.gpu_status = f"{NOT_AVAILABLE}: {reason}"
    else:
        s.gpu_status = "nvidia-smi"
        if exit_code is not None:
            s.gpu_error = f"nvidia-smi stopped after {len(s.gpu)} samples (status {exit_code})" + (
                f": {detail}" if texts else ""
            )
    ok = any(m.available_kb is not None for m in s.memory)
    why = no_memory or error or ("/proc/meminfo has no MemAvailable" if s.memory else "no sample received")
    s.memory_status = "/proc/meminfo" if ok else f"{NOT_AVAILABLE}: {why}"
    return s


def reason_names(mask: int | None) -> list[str]:
    """The names of the set bits of a clock-reasons bitmask (unknown bits as hex)."""
    if not mask:
        return []
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(REASON_BITS)
    return names + ([f"0x{rest:x}"] if rest else [])


def node_csv(s: NodeSeries) -> str:
    """The node's raw samples as `telemetry/<node>.csv` text (CSV_HEADER; values as the tools printed them)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_HEADER.split(","))
    rows = [(g.t, "nvidia-smi", *g.raw, "", "", "") for g in s.gpu]
    rows += [
        (
            m.t,
            "meminfo",
            m.node_time,
            *[""] * 7,
            *("" if v is None else v for v in (m.total_kb, m.available_kb, m.cached_kb)),
        )
        for m in s.memory
    ]
    w.writerows(sorted(rows, key=lambda r: r[0]))
    return out.getvalue()


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
    spans = []
    for rep in sorted({r.rep for r in ok if r.phase == "decode"}):
        dec = [r for r in ok if r.phase == "decode" and r.rep == rep]
        spans.append((min(r.t_send for r in dec), max(r.t_end for r in dec)))
    inside = [r for r in ok if r.phase != "prefill" and any(a <= r.t_send and r.t_end <= b for a, b in spans)]
    out = []
    if spans:
        out.append(Window("decode", tuple(spans), sum(r.output_tokens or 0 for r in inside), "output"))
    for p in targets:
        pre = [r for r in ok if r.phase == "prefill" and r.prompt_target == p]
        pre = [r for r in pre if not any(f in r.flags for f in excluded)]
        if pre:
            tokens = sum((r.prompt_tokens or 0) - (r.cached_tokens or 0) for r in pre)
            out.append(Window(f"prefill_{p}", tuple((r.t_send, r.t_end) for r in pre), tokens, "prompt"))
    return out


def node_window(s: NodeSeries, w: Window) -> dict:
    """One node over one window: energy and mean power, SM clock, temperature, utilization, clock reasons,
    minimum MemAvailable. Keys without a sample behind them are left out, never 0."""

    gpu, borrowed = [], 0
    for index in sorted({g.gpu for g in s.gpu}, key=lambda i: -1 if i is None else i):
        part, n = in_window([g for g in s.gpu if g.gpu == index], w.intervals)
        gpu, borrowed = gpu + part, borrowed + n
    mem = [m.available_kb for m in in_window(s.memory, w.intervals)[0] if m.available_kb is not None]
    out: dict = {}
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


def in_window(samples: Sequence, intervals: Sequence[tuple[int, int]]) -> tuple[list, int]:
    """(the samples a window's figures come from, how many of them lie outside it): those stamped inside an
    interval; for an interval without one (shorter than the period), the last sample before it and the first
    after it, the ones its energy is interpolated from."""
    used, borrowed = {}, 0
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


def window_summary(series: Mapping[str, NodeSeries], w: Window) -> dict:
    """The window over every node, with the window's energy per token when every node that sampled its GPU
    covered the whole window (docs/measurement.md, "Node telemetry")."""
    seconds = sum(b - a for a, b in w.intervals) / NS
    nodes = {name: node_window(s, w) for name, s in sorted(series.items())}
    out: dict = {"seconds": seconds, "tokens": w.tokens, "token_kind": w.token_kind, "nodes": nodes}
    gpus = [n for name, n in nodes.items() if series[name].gpu]
    if gpus and all(n.get("covered_s", 0) >= seconds * 0.99 for n in gpus):
        out["energy_j"] = sum(n["energy_j"] for n in gpus)
        if w.tokens:
            out["joules_per_token"] = out["energy_j"] / w.tokens
    elif gpus:
        out["note"] = "the GPU samples do not cover the whole window: no energy per token"
    return out


def health_flags(
    name: str, win: dict, baseline: Mapping[str, float] | None, drop: float
) -> list[dict[str, str]]:
    """`low-clock` (a node's SM-clock median more than `drop` below its healthy baseline) and `throttled` (the
    GPU reported a thermal or power limit) for one window summary; each node entry gets its flag codes."""
    out = []
    for node, n in win["nodes"].items():
        codes = n.setdefault("flags", [])
        m, base = n.get("sm_clock_median_mhz"), (baseline or {}).get(node)
        if m is not None and base and m < base * (1 - drop):
            codes.append("low-clock")
            message = (
                f"{node}: SM clock median {m:.0f} MHz over {n['samples']} samples is {1 - m / base:.0%} below "
                f"its healthy {base:.0f} MHz (more than the {drop:.0%} allowed)"
            )
            out.append({"code": "low-clock", "window": name, "message": message})
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
) -> tuple[dict, list[dict[str, str]]]:
    """(summary.telemetry, flags): per-node availability, each window's summary, the health flags."""
    out: dict = {"period_ms": run.period_ms, "nodes": {n: s.status() for n, s in sorted(run.series.items())}}
    flags = []
    for w in run_windows(records, targets, excluded):
        out[w.name] = window_summary(run.series, w)
        flags += health_flags(w.name, out[w.name], run.clock_baseline, run.clock_drop)
    return out, flags


def telemetry_windows(telemetry: Mapping) -> dict[str, dict]:
    """The window entries of a summary.telemetry ("decode", "prefill_<P>"), without "nodes" and "period_ms"."""
    return {k: v for k, v in telemetry.items() if k == "decode" or k.startswith("prefill_")}


def healthy_clocks(telemetry: Mapping) -> dict[str, float]:
    """Per node, the median of its SM-clock medians over the windows that raised no flag on it: what a
    baseline of healthy clocks can be updated from. Nodes without such a window are left out."""
    seen: dict[str, list[float]] = {}
    for win in telemetry_windows(telemetry).values():
        for node, n in win.get("nodes", {}).items():
            if n.get("sm_clock_median_mhz") is not None and not n.get("flags"):
                seen.setdefault(node, []).append(n["sm_clock_median_mhz"])
    return {node: median(v) for node, v in sorted(seen.items())}
