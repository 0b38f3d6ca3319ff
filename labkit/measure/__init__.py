"""Step 4, measure: an endpoint URL and a `MeasurePlan` in, per-request and per-group records plus a run
summary out, each figure with the method that produced it (token source, timer, window).
"""

from labkit.measure.client import StreamClient, StreamRequest, StreamResult
from labkit.measure.io_probe import (
    LocalNfsProbe,
    NodeNfsProbe,
    nfs_counters,
    nfs_read_delta,
    parse_mountstats,
)
from labkit.measure.notefmt import fmt_range, fmt_rate, render, rows
from labkit.measure.records import GroupRecord, RequestRecord, RunSummary
from labkit.measure.runner import BenchResult, default_plan, make_record, run_bench
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
    "NS", "BenchResult", "GroupRecord", "LocalNfsProbe", "NodeNfsProbe", "nfs_counters", "nfs_read_delta", "RequestRecord", "RunSummary", "StreamClient",
    "StreamRequest", "StreamResult", "cumulative_tokens", "decode_tps", "decode_window",
    "default_plan", "fmt_range", "fmt_rate", "group_aggregate", "make_record", "median", "parse_mountstats",
    "prefill_tps", "render", "rows", "run_bench",
]
