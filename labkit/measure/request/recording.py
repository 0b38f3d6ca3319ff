"""Raw streams into records: one StreamResult -> one RequestRecord, one lockstep group -> one GroupRecord.

Pure: the timing formulas (labkit/measure/request/timing.py) and the validity rules, no I/O. A record that fails a
rule is kept with ok=False and its reason; a suspect one keeps ok=True and says why in `flags`. The engine's
own per-request figures, when the response carries them, are set beside labkit's (servertruth.py), and a
text that ends in an exact repetition is marked (sanity.py).
"""

from __future__ import annotations

from typing import Any

from labkit.measure.prompt import prompts as pr
from labkit.measure.records import GroupRecord, Phase, RequestRecord
from labkit.measure.request.sse import StreamResult
from labkit.measure.request.timing import (
    BURST_GAP_NS,
    NS,
    decode_tps,
    decode_window,
    first_arrival_merged,
    group_aggregate,
    prefill_tps,
)
from labkit.measure.server.servertruth import apply_server_truth
from labkit.measure.summary.sanity import mark_loop
from labkit.recipe import Api

CACHE_HIT_TOLERANCE = (
    64  # cached prompt tokens allowed per unique prompt: a shared template preamble (≤ a block)
)
BURST_SHARE = (
    0.5  # a stream whose decode tokens came mostly in back-to-back reads has no usable decode timing
)
BURST_FLAG = "burst-read"
# The client sees only when bytes arrived: a server that held its output and a reader that fell behind look
# the same from here (docs/measurement.md, "Burst reads and the server's view").
BURST_BLAME = "labkit cannot tell whether the server or the client held them"


def make_record(
    res: StreamResult,
    *,
    t_origin: int,
    rtt_ns: int,
    phase: Phase,
    requested: int,
    rep: int = 0,
    run_id: str = "",
    lane: str = "",
    api: Api = "chat",
    concurrency: int = 1,
    turn: int = 0,
    stream: int = 0,
    cold: bool = False,
    nonce: str = "",
    group: int | None = None,
    prompt_target: int = 0,
    counted: int | None = None,
    counted_source: str = "tokenize",
    content: str = "",
    content_id: str = "",
) -> RequestRecord:
    """Apply the formulas and validity rules to one raw stream.

    Failed (ok=False, excluded from summaries): transport/HTTP errors, no finish_reason, finish_reason other
    than "length" (the output length was forced), no token count, fewer tokens than requested. Flagged (kept,
    but prefill summaries skip them): prompt length off by more than 1%, prefix-cache hits. `counted` is the
    prompt's server count from the length counter, used for P only when the stream reports no usage.
    """
    prompt_tokens, source = res.prompt_tokens, "usage" if res.prompt_tokens is not None else ""
    if prompt_tokens is None and counted is not None:
        prompt_tokens, source = counted, counted_source
    rec = RequestRecord(
        run_id=run_id,
        lane=lane,
        rep=rep,
        phase=phase,
        content=content,
        content_id=content_id,
        concurrency=concurrency,
        turn=turn,
        stream=stream,
        cold=cold,
        api=api,
        requested_tokens=requested,
        prompt_target=prompt_target,
        prompt_tokens=prompt_tokens,
        prompt_tokens_source=source,
        group=group,
        nonce=nonce,
        rtt_s=rtt_ns / NS,
        **_stream_fields(res, t_origin),
    )
    flags = list(res.warnings)
    _first_token_times(rec, res)
    if rec.ok:
        _check_length(rec, res, requested, flags)
    if phase != "prefill" and res.output_tokens is not None and rec.ok and res.chunk_t:  # failed: no rate
        _decode_rate(rec, res, flags)
    if phase == "prefill" and res.t_first is not None and prompt_tokens is not None and rec.ok:
        _prefill_rate(rec, res, prompt_tokens, prompt_target, rtt_ns, flags)
    rec.flags = "; ".join(flags)
    apply_server_truth(rec, res.engine_metrics)  # the engine's own figures beside labkit's
    mark_loop(rec, res.text)
    return rec


def _stream_fields(res: StreamResult, t_origin: int) -> dict[str, Any]:
    """The RequestRecord fields read off the stream as it came: counts, outcome, and every stamp made
    relative to the run's origin `t_origin`."""

    def rel(t: int | None) -> int | None:
        return None if t is None else t - t_origin

    return dict(
        cached_tokens=res.cached_tokens,
        output_tokens=res.output_tokens,
        output_tokens_source=res.output_tokens_source,
        n_first=res.chunk_n[0] if res.chunk_n else None,
        chunks=len(res.chunk_t),
        t_send=res.t_send - t_origin,
        t_hdr=rel(res.t_hdr),
        t_chunk1=rel(res.t_chunk1),
        t_first=rel(res.t_first),
        t_content=rel(res.t_content),
        t_second=rel(res.chunk_t[1]) if len(res.chunk_t) > 1 else None,
        t_last=rel(res.t_last),
        t_end=rel(res.t_end),
        finish_reason=res.finish_reason,
        http_status=res.http_status,
        ok=res.ok,
        error=res.error,
        response_id=res.response_id,
        usage=res.usage,
        chunk_t=[t - t_origin for t in res.chunk_t],
        chunk_n=list(res.chunk_n or []),
    )


def _first_token_times(rec: RequestRecord, res: StreamResult) -> None:
    """TTFT (first generated token), TTFR (first chunk with choices) and content TTFT, each from t_send."""
    if res.t_first is not None:
        rec.ttft_s = (res.t_first - res.t_send) / NS
    if res.t_chunk1 is not None:
        rec.ttfr_s = (res.t_chunk1 - res.t_send) / NS
    if res.t_content is not None:
        rec.ttft_content_s = (res.t_content - res.t_send) / NS


def _check_length(rec: RequestRecord, res: StreamResult, requested: int, flags: list[str]) -> None:
    """The length was forced: a stream not ending on it, uncounted or short fails; a longer one is flagged."""
    if res.finish_reason != "length":
        rec.ok, rec.error = (
            False,
            f"finish_reason {res.finish_reason!r}, expected 'length' (forced length)",
        )
    elif res.output_tokens is None:
        rec.ok, rec.error = False, "no token count (no usage and no token-bearing chunks)"
    elif res.output_tokens < requested:
        rec.ok, rec.error = False, f"short: {res.output_tokens} of {requested} tokens"
    elif res.output_tokens != requested:
        flags.append(f"output {res.output_tokens} != requested {requested}")


def _decode_rate(rec: RequestRecord, res: StreamResult, flags: list[str]) -> None:
    """Decode t/s of a counted, ok stream, after its first arrival; one read in bursts is flagged, since its
    stamps then say when the client read the tokens, not when they arrived."""
    counts = res.chunk_n
    if not counts:
        counts = [1] * len(res.chunk_t)
        flags.append("n_first assumed 1 per chunk (no per-chunk counts)")
    assert res.output_tokens is not None  # make_record calls this for counted streams only
    w = decode_window(res.chunk_t, counts, res.output_tokens)
    if res.chunk_n:
        rec.n_first = w.n_first
    rec.decode_tps = decode_tps(res.output_tokens, w.n_first, w.t_start, res.t_last)
    if w.window_tokens <= 0 and len(res.chunk_t) > 1:
        flags.append(
            f"{BURST_FLAG} (all {res.output_tokens} tokens reached the client in one burst: no decode "
            f"window; {BURST_BLAME})"
        )
    elif w.window_tokens > 0 and w.burst_share > BURST_SHARE:
        flags.append(
            f"{BURST_FLAG} ({w.burst_tokens} of {w.window_tokens} decode tokens reached the client "
            f"in back-to-back reads < {BURST_GAP_NS // 1000} us apart, so their stamps say when they "
            f"were read, not when they were generated; {BURST_BLAME}; excluded from decode)"
        )


def _prefill_rate(
    rec: RequestRecord,
    res: StreamResult,
    prompt_tokens: int,
    prompt_target: int,
    rtt_ns: int,
    flags: list[str],
) -> None:
    """Prefill t/s of an ok stream with a first token, RTT-corrected and raw; a prompt off its target length
    or served from the prefix cache is flagged, so prefill summaries skip it."""
    assert res.t_first is not None  # make_record calls this for streams with a first token only
    ttft = res.t_first - res.t_send
    rec.prefill_tps = prefill_tps(prompt_tokens, res.cached_tokens, ttft, rtt_ns)
    rec.prefill_tps_raw = prefill_tps(prompt_tokens, 0, ttft, 0)
    if prompt_target and abs(prompt_tokens - prompt_target) > pr.LENGTH_TOLERANCE * prompt_target:
        flags.append(f"prompt-length-off ({prompt_tokens} vs target {prompt_target})")
    if (res.cached_tokens or 0) > CACHE_HIT_TOLERANCE:
        flags.append(f"prefix-cache-hit ({res.cached_tokens} cached tokens)")


def client_concurrency(recs: list[RequestRecord]) -> float | None:
    """Streams decoding at once on average over the group's span, from the client's stamps: the streams' decode
    times (a failed stream without tokens adds none) over max t_last - min t_first. None when no stream has
    a decode interval, or a stream's stamps are read times (burst-read)."""
    if any(BURST_FLAG in r.flags for r in recs):
        return None
    spans = [(r.t_first, r.t_last) for r in recs if r.t_first is not None and r.t_last is not None]
    if not spans:
        return None
    span = max(b for _, b in spans) - min(a for a, _ in spans)
    return sum(b - a for a, b in spans) / span if span > 0 else None


def set_concurrency(g: GroupRecord, recs: list[RequestRecord]) -> None:
    """The group's effective concurrency, set again once `server_window` is known: the engine's request steps
    per engine step when its /metrics give them, else the client's timing (docs/measurement.md, "Drain and effective concurrency")."""
    view = g.server_window or {}
    if view.get("engine_steps") and view.get("request_steps"):
        g.concurrency_engine = view["request_steps"] / view["engine_steps"]
    g.concurrency_client = client_concurrency(recs)
    if g.concurrency_engine is not None:
        g.effective_concurrency, g.concurrency_source = g.concurrency_engine, "engine steps"
    elif g.concurrency_client is not None:
        g.effective_concurrency, g.concurrency_source = g.concurrency_client, "client timing"


def make_group(
    recs: list[RequestRecord], k: int, index: int, *, run_id: str = "", rep: int = 0
) -> GroupRecord:
    """The aggregate decode estimators of one lockstep group of `k` streams (failed when any stream failed)."""
    g = GroupRecord(run_id=run_id, rep=rep, concurrency=k, group=index)
    set_concurrency(g, recs)  # the client's timing until the group's window gives the engine's steps
    bad = [r for r in recs if not r.ok]
    if bad:
        g.ok, g.note = False, f"{len(bad)} of {k} streams failed"
        return g
    g.burst_streams = sum(BURST_FLAG in r.flags for r in recs)
    burst_note = (
        f"{g.burst_streams} stream(s) burst-read: agg excluded, and the client's stamps cannot say whether "
        "the engine overlapped the streams"
        if g.burst_streams
        else ""
    )
    if any(not r.chunk_n for r in recs):
        est = group_aggregate([first_arrival_merged(r.chunk_t, [1] * len(r.chunk_t)) for r in recs])
        firsts = [r.t_first for r in recs if r.t_first is not None]
        lasts = [r.t_last for r in recs if r.t_last is not None]
        span = max(lasts) - min(firsts) if len(firsts) == len(lasts) == len(recs) else 0
        tokens = sum((r.output_tokens or 0) - 1 for r in recs)
        g.span_tps = tokens * NS / span if span > 0 and tokens > 0 else None
        g.overlap, g.window_start, g.window_end = est.overlap, est.window_start, est.window_end
        g.note = "; ".join(
            filter(None, ["no per-chunk token counts: span estimator only (n_first assumed 1)", burst_note])
        )
        g.serialised = est.serialised and not g.burst_streams
        return g
    est = group_aggregate([first_arrival_merged(r.chunk_t, r.chunk_n) for r in recs])
    g.agg_tps, g.window_tps, g.span_tps, g.overlap = est.agg_tps, est.window_tps, est.span_tps, est.overlap
    g.window_start, g.window_end, g.window_tokens = est.window_start, est.window_end, est.window_tokens
    # Burst-read stamps are read times: no overlap (or its absence) can be read off them.
    g.serialised = est.serialised and not g.burst_streams
    serial = "streams did not overlap: the engine serialised them; not a concurrency measurement"
    g.note = "; ".join(filter(None, [serial if g.serialised else "", burst_note]))
    return g
