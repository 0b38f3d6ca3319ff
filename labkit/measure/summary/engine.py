"""What the engine says it did, per request and per group, in a run's summary: its own per-request TTFT and
decode beside labkit's (client − engine agreement), per-request speculative acceptance per concurrency, and
the concurrency the engine actually ran per cK group, with a flag when it ran fewer streams than asked
(docs/measurement.md, "Per-request server truth" and "Drain and effective concurrency").

Pure: records and groups in, measures, counters, notes and flags written onto the RunSummary.
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.measure.records import GroupRecord, RequestRecord, RunSummary
from labkit.measure.request.recording import BURST_FLAG
from labkit.measure.request.timing import median
from labkit.measure.server.servertruth import spec_counts
from labkit.measure.summary.speed import put
from labkit.measures import measure_key

SHORT_SHARE = 0.75  # a group whose effective concurrency is below this share of K ran short
ENGINE_TTFT = (
    "queue_time_ms + time_to_first_token_ms of the response's metrics (engine core queue to first token)"
)
ENGINE_DECODE = "(N - 1) / generation_time_ms of the response's metrics (the engine's first to last token)"


def _decode_records(ok: Sequence[RequestRecord], k: int) -> list[RequestRecord]:
    """The measured decode requests at concurrency k: the warm turns at c1, every stream at cK."""
    return [r for r in ok if r.phase == "decode" and r.concurrency == k and not r.cold]


def engine_measures(s: RunSummary, ok: Sequence[RequestRecord], asked: bool = False) -> None:
    """Per concurrency: the engine's own decode rate, client − engine TTFT and client / engine − 1 decode
    (medians over the requests that carried the engine's figures), and per-request acceptance pooled. `asked`:
    the lane turned the engine's per-request metrics on, so responses without them are noted."""
    decode = [r for r in ok if r.phase == "decode"]
    if asked and decode and not any(r.engine_metrics for r in decode):
        s.notes.append(
            "per-request server truth: the lane asked for the engine's per-request metrics, but no response "
            "carried a metrics object (an engine build without them, or --disable-log-stats)"
        )
    for k in sorted({r.concurrency for r in ok if r.phase == "decode"}):
        recs = _decode_records(ok, k)
        clean = [r for r in recs if BURST_FLAG not in r.flags]
        put(
            s,
            measure_key("decode_c<N>_engine", concurrency=k),
            [r.engine_decode_tps for r in recs],
            f"median over the requests of c{k}: {ENGINE_DECODE}",
        )
        put(
            s,
            measure_key("decode_c<N>_engine_gap", concurrency=k),
            [r.decode_vs_engine for r in clean],
            f"median per request of labkit's decode_tps / the engine's - 1 ({ENGINE_DECODE}); "
            "burst-read requests left out",
        )
        put(
            s,
            measure_key("decode_c<N>_ttft_engine_gap", concurrency=k),
            [r.ttft_minus_engine_s for r in recs],
            f"median per request of labkit's TTFT - the engine's ({ENGINE_TTFT}), seconds",
        )
        _request_acceptance(s, k, recs)


def _request_acceptance(s: RunSummary, k: int, recs: Sequence[RequestRecord]) -> None:
    """ā and τ at concurrency k from each request's own speculative counts, pooled (Σ over the requests)."""
    counted = [(r, spec_counts(r.engine_metrics)) for r in recs]
    got = [(r, c) for r, c in counted if c is not None and r.output_tokens]
    if not got:
        return
    accepted = sum(c["accepted"] for _, c in got)
    steps = sum(c["steps"] for _, c in got)
    tokens = sum(r.output_tokens or 0 for r, _ in got)
    how = f"{len(got)} requests of c{k}, each response's metrics.speculative_decoding, pooled"
    if steps:
        key = measure_key("decode_c<N>_accept_per_draft", concurrency=k)
        s.measures[key] = accepted / steps
        s.samples[key] = [r.engine_accept_per_draft for r, _ in got if r.engine_accept_per_draft is not None]
        s.method[key] = f"ā = Σ num_accepted_draft_tokens / Σ num_spec_steps ({how})"
    if tokens > accepted:
        key = measure_key("decode_c<N>_accept_length", concurrency=k)
        s.measures[key] = tokens / (tokens - accepted)
        s.samples[key] = [r.engine_accept_length for r, _ in got if r.engine_accept_length is not None]
        s.method[key] = (
            f"τ = Σ N / Σ (N - accepted): tokens per engine step, the prefill step and the bonus token "
            f"included ({how})"
        )


def concurrency_measures(s: RunSummary, groups: Sequence[GroupRecord]) -> None:
    """Per K: the median effective concurrency of the groups, and a `short-concurrency` flag naming the
    groups that ran below SHORT_SHARE of K."""
    for k in sorted({g.concurrency for g in groups}):
        gs = [g for g in groups if g.concurrency == k]
        values = [g.effective_concurrency for g in gs]
        sources = sorted({g.concurrency_source for g in gs if g.concurrency_source})
        put(
            s,
            measure_key("decode_c<N>_concurrency", concurrency=k),
            values,
            f"median over the groups of {k} of the streams the engine ran at once ({', '.join(sources)}: "
            "request steps per engine step from /metrics, else the streams' decode time over their span)",
        )
        short = [
            g for g in gs if g.effective_concurrency is not None and g.effective_concurrency < SHORT_SHARE * k
        ]
        if short:
            mid = median([g.effective_concurrency for g in short])
            s.flags.append(
                {
                    "code": "short-concurrency",
                    "window": f"decode_c{k}",
                    "message": (
                        f"decode_c{k}: {len(short)} of {len(gs)} groups ran at an effective concurrency below "
                        f"{SHORT_SHARE * k:g} ({SHORT_SHARE:g} x {k}; median of those {mid:.2f}, "
                        f"{', '.join(sorted({g.concurrency_source for g in short}))}): the engine ran fewer "
                        "streams at once than asked"
                    ),
                }
            )
