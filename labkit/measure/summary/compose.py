"""Records in, RunSummary out: the named measures (labkit/measure/records.py), each with its samples, range
and method, plus the run's counters (acceptance, prefix cache, NFS), notes on what was excluded and why, and
each window's evidence with the flags it raises (docs/measurement.md, "Per-run evidence").

Each workload of the registry (labkit/measure/workloads/) writes its own measures; then come the run-wide ones,
from the counters (acceptance, prefix cache, NFS, telemetry figures), the engine's per-request figures and the
windows' evidence and flags; sanity.py last counts each window's responses and leaves out the figures of a
window with failures. This module composes them.
Pure: everything the summary says comes from the records and the counter deltas passed in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from labkit.measure.records import GroupRecord, RequestRecord, RunSummary
from labkit.measure.server import metrics as mx
from labkit.measure.server.scrapes import WindowEvidence
from labkit.measure.summary.counters import (
    acceptance_measures,
    nfs_summary,
    prefix_cache_measures,
    telemetry_measures,
)
from labkit.measure.summary.engine import engine_measures
from labkit.measure.summary.evidence import evidence_flags, pooled_evidence
from labkit.measure.summary.sanity import apply_sanity
from labkit.measure.summary.speed import PREFILL_EXCLUDED
from labkit.measure.telemetry.health import TelemetryRun, summarize_telemetry
from labkit.measure.workloads import WORKLOADS, SummaryInput, tolerated_failures, window_of
from labkit.recipe import MeasurePlan

INTERVALS_OVER_RUNS = (
    "over runs (tables, labkit compare, measure.target_ci) this run's value of each measure is one sample: "
    "a 95 % Student-t interval on run means from 3 runs on (no bootstrap); Welch or paired t between lanes"
)


def summarize(
    records: Sequence[RequestRecord],
    groups: Sequence[GroupRecord],
    plan: MeasurePlan,
    *,
    acceptance: mx.Acceptance | None = None,
    pc_window: Sequence[tuple[float, float]] = (),
    notes: Sequence[str] = (),
    rtt_ns: int = 0,
    counter_kind: str = "",
    io: dict[str, dict[str, float]] | None = None,
    windows: Sequence[WindowEvidence] = (),
    telemetry: TelemetryRun | None = None,
    loops_expected: bool = False,
    engine_metrics_asked: bool = False,
    content_acceptance: Mapping[str, mx.Acceptance] | None = None,
    request_accepted: float | None = None,
    level_gauges: Mapping[str, Sequence[Sequence[float]]] | None = None,
    failed_levels: Mapping[str, str] | None = None,
) -> RunSummary:
    """The RunSummary of one run. `pc_window`: (hits, queries) prefix-cache deltas of the prefill samples;
    `notes`: the run's own notes, put before the summary's; `windows`: what the engine's /metrics said about
    each window, pooled into `evidence` and worded as `flags` (docs/measurement.md, "Per-run evidence");
    `telemetry`: the nodes' samples, summarized per window with their health flags (docs/measurement.md,
    "Node telemetry"); `loops_expected`: the model loops by nature, so looping responses are reported, not
    gating (docs/measurement.md, "Output sanity"); `content_acceptance`: each content category's acceptance
    (docs/measurement.md, "Prompt content"); `request_accepted`: the per-request accepted drafts summed over
    the decode windows whose acceptance counted, when every one of them could be checked; `level_gauges`: the
    engine's gauges sampled while each load level ran, `failed_levels` the level the engine died in ("Serving
    under load")."""
    s = RunSummary(evidence=pooled_evidence(windows), flags=evidence_flags(windows))
    s.method["intervals"] = INTERVALS_OVER_RUNS
    ok = [r for r in records if r.ok]
    s.n_ok, s.n_failed = len(ok), len(records) - len(ok)
    sources = sorted({r.output_tokens_source for r in ok if r.output_tokens_source})
    src = ", ".join(sources) or "none"
    inp = SummaryInput(
        records, ok, groups, plan, src, rtt_ns, counter_kind, content_acceptance, level_gauges, failed_levels
    )
    for workload in WORKLOADS.values():  # each workload's own measures (labkit/measure/workloads/)
        if workload.active(plan):
            workload.summarize(s, inp)
    if acceptance is not None:
        acceptance_measures(s, acceptance)
    engine_measures(s, ok, engine_metrics_asked)
    if request_accepted is not None and "spec_accepted" in s.counters:
        s.counters["engine_request_accepted"] = request_accepted  # beside spec_accepted (workloads/decode.py)
    if pc_window:
        prefix_cache_measures(s, pc_window)
    if io:
        nfs_summary(s, io)
    if telemetry is not None:
        s.telemetry, flags = summarize_telemetry(
            telemetry, records, plan.prefill.prompt_tokens, PREFILL_EXCLUDED
        )
        s.flags += flags
        telemetry_measures(s)
    if s.n_failed:
        s.notes.append(
            f"{s.n_failed} failed request(s) excluded: "
            + "; ".join(sorted({r.error for r in records if not r.ok}))[:300]
        )
    apply_sanity(s, records, window_of, loops_expected, tolerated_failures(plan))
    s.notes = list(notes) + s.notes
    return s
