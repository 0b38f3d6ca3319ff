"""Step 4, measure: an endpoint URL and a `MeasurePlan` in, per-request and per-group records plus a run
summary out, each figure with the method that produced it (token source, timer, window).

client (stamped streams, sse parsed after the stream) -> recording (records) -> runner (`Bench`, the plan; its
`BenchOptions`) on session (`RunContext` read by the phases, `RunLog` they add to) through decode_phase and
prefill_phase (prompts, tokencount, scrapes, metrics, kvpool, io_probe) -> outcome -> summary (RunSummary,
from summary_speed, summary_counters, summary_evidence; timing's formulas) and provenance, all in records;
summary_text renders the summary as the lab note's table. telemetry_run samples every node (nvidia-smi,
/proc/meminfo) while a run measures; telemetry_series parses the samples, telemetry_energy summarizes them per
window with energy per token, and telemetry adds the health flags.
"""

from labkit.measure.client import EndpointError, StreamClient, StreamRequest, split_base
from labkit.measure.io_probe import (
    LocalNfsProbe,
    NodeNfsProbe,
    nfs_counters,
    nfs_read_delta,
    parse_mountstats,
)
from labkit.measure.metrics import configured_k
from labkit.measure.recording import make_group, make_record
from labkit.measure.records import BenchResult, GroupRecord, RequestRecord, RunSummary
from labkit.measure.runner import Bench, BenchOptions, default_plan, run_bench, run_bench_async
from labkit.measure.sse import SSEParser, StreamResult
from labkit.measure.summary import summarize
from labkit.measure.summary_counters import nfs_summary
from labkit.measure.summary_text import fmt_range, fmt_rate, render, rows
from labkit.measure.telemetry import health_flags, healthy_clocks, summarize_telemetry, telemetry_windows
from labkit.measure.telemetry_run import NodeTelemetry, sampler_script
from labkit.measure.telemetry_series import NodeSeries, TelemetryRun, parse_node, reason_names
from labkit.measure.timing import (
    NS,
    cumulative_tokens,
    decode_tps,
    decode_window,
    group_aggregate,
    median,
    prefill_tps,
)

__all__ = [
    "NS",
    "Bench",
    "BenchOptions",
    "BenchResult",
    "EndpointError",
    "GroupRecord",
    "LocalNfsProbe",
    "NodeNfsProbe",
    "NodeSeries",
    "NodeTelemetry",
    "RequestRecord",
    "RunSummary",
    "SSEParser",
    "StreamClient",
    "StreamRequest",
    "StreamResult",
    "TelemetryRun",
    "configured_k",
    "cumulative_tokens",
    "decode_tps",
    "decode_window",
    "default_plan",
    "fmt_range",
    "fmt_rate",
    "group_aggregate",
    "health_flags",
    "healthy_clocks",
    "make_group",
    "make_record",
    "median",
    "nfs_counters",
    "nfs_read_delta",
    "nfs_summary",
    "parse_mountstats",
    "parse_node",
    "prefill_tps",
    "reason_names",
    "render",
    "rows",
    "run_bench",
    "run_bench_async",
    "sampler_script",
    "split_base",
    "summarize",
    "summarize_telemetry",
    "telemetry_windows",
]
