"""Step 4, measure: an endpoint URL and a `MeasurePlan` in, per-request and per-group records plus a run
summary out, each figure with the method that produced it (token source, timer, window).

runner (`Bench`, the plan; its `BenchOptions`) on session (`RunContext` read by the workloads, `RunLog` they add
to) through workloads/, the registry of every way of measuring -> outcome (the `BenchResult`, with provenance),
all in records. The families, a folder each: request/ (client, stream, record, timing formulas, arrival
schedules), prompt/ (what the requests say), server/ (what the engine says: per-request figures, /metrics
counters, gauges, KV pool), telemetry/ (what the nodes did: samples, energy, health, NFS counters) and summary/
(records into measures, the lab-note rendering).
"""

from labkit.measure.records import BenchResult, RequestRecord, RunSummary
from labkit.measure.request.timing import median
from labkit.measure.runner import BenchOptions, default_plan, planned_requests, run_bench
from labkit.measure.server.metrics import configured_k
from labkit.measure.summary.canary import canary_flag
from labkit.measure.summary.latency import LEVEL_PERCENTILES
from labkit.measure.summary.text import render, server_truth_row
from labkit.measure.telemetry.health import LOW_CLOCK, healthy_clocks
from labkit.measure.telemetry.io_probe import LocalNfsProbe, NodeNfsProbe
from labkit.measure.telemetry.sampling import NodeTelemetry
from labkit.measure.workloads import WORKLOADS

__all__ = [
    "LEVEL_PERCENTILES",
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
    "planned_requests",
    "render",
    "run_bench",
    "server_truth_row",
]
