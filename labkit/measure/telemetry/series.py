"""Node telemetry, the samples: a node sampler's output lines parsed into per-node series (nvidia-smi rows,
/proc/meminfo readings, what was not available and why) and the series written back as CSV text
(docs/measurement.md, "Node telemetry").

The sampler (labkit/measure/telemetry/sampling.py) hands over `(t, line)` pairs, t being labkit's own
`time.perf_counter_ns()` when the line arrived, already made relative to the run's origin like the records'
stamps. A value the tool could not give ("[N/A]", "[Not Supported]") stays None, never 0, and a node without
nvidia-smi says so once in its status instead of carrying empty GPU figures. Pure.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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

    def status(self) -> dict[str, Any]:
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
        values[2],
        values[3],
        values[4],
        values[5],
        values[6],
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
    rows: list[tuple[int | str, ...]] = [(g.t, "nvidia-smi", *g.raw, "", "", "") for g in s.gpu]
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
    rows.sort(key=lambda r: r[0])
    w.writerows(rows)
    return out.getvalue()
