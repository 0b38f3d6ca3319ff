"""Step 4, measure: an endpoint URL and a `MeasurePlan` in, per-request and per-group records plus a run
summary out, each figure with the method that produced it (token source, timer, window).

client (stamped streams, sse parsed after the stream) -> recording (records, with the engine's own per-request
figures from servertruth and the loop mark from sanity) -> runner (`Bench`, the plan; its `BenchOptions`) on
session (`RunContext` read by the workloads, `RunLog` they add to) through the workloads of workloads/, the
registry of every way of measuring (multi-turn sessions as chat messages from conversation, context depths as
text from context; prompts, corpus: the pinned prompt corpus of corpus/, tokencount, scrapes, drain, metrics,
kvpool, io_probe) -> outcome -> summary (RunSummary: each workload's measures, from summary_speed (decode and
prefill), summary_content, summary_turns (per session turn, idle turns), summary_depth (per context depth) and
summary_canary (the slow-state canary); then summary_counters, summary_engine, summary_evidence and sanity;
timing's formulas) and provenance, all in records;
summary_text renders the summary as the lab note's table. telemetry_run samples every node (nvidia-smi,
/proc/meminfo) while a run measures; telemetry_series parses the samples, telemetry_energy summarizes them per
window with energy per token, and telemetry adds the health flags.
"""

from labkit.measure.io_probe import LocalNfsProbe, NodeNfsProbe
from labkit.measure.metrics import configured_k
from labkit.measure.records import BenchResult, RequestRecord, RunSummary
from labkit.measure.runner import BenchOptions, default_plan, run_bench
from labkit.measure.summary_canary import canary_flag
from labkit.measure.summary_text import render, server_truth_row
from labkit.measure.telemetry import LOW_CLOCK, healthy_clocks
from labkit.measure.telemetry_run import NodeTelemetry
from labkit.measure.timing import median
from labkit.measure.workloads import WORKLOADS

__all__ = [
    "LOW_CLOCK",
    "WORKLOADS",
    "BenchOptions",
    "BenchResult",
    "LocalNfsProbe",
    "NodeNfsProbe",
    "NodeTelemetry",
    "RequestRecord",
    "RunSummary",
    "canary_flag",
    "configured_k",
    "default_plan",
    "healthy_clocks",
    "median",
    "render",
    "run_bench",
    "server_truth_row",
]
