"""Speed formulas on stream timelines (measurement.md §3-§5). Pure functions: stamps in, numbers out.

Every stamp is an integer of nanoseconds from one monotonic clock (`time.perf_counter_ns`). A stream's
token-bearing chunks are given as two parallel lists: arrival stamps and tokens per chunk. Decode ends at the
last token-bearing chunk, never at the usage chunk or `[DONE]`, and excludes the first chunk (prefill + first
sampling), so `decode_tps = (N - n_first) / (t_last - t_first)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NS = 1_000_000_000


def decode_tps(n_tokens: int | None, n_first: int | None, t_first: int | None, t_last: int | None) -> float | None:
    """Per-request decode rate; None when there is no interval to divide by (one chunk, or unknown counts)."""
    if n_tokens is None or n_first is None or t_first is None or t_last is None:
        return None
    if t_last <= t_first or n_tokens - n_first <= 0:
        return None
    return (n_tokens - n_first) * NS / (t_last - t_first)


def prefill_tps(prompt_tokens: int | None, cached_tokens: int | None, ttft_ns: int | None,
                rtt_ns: int = 0) -> float | None:
    """(P - C) / (TTFT - RTT): a lower bound on the engine's prefill rate (queueing and one decode step remain)."""
    if prompt_tokens is None or ttft_ns is None:
        return None
    span = ttft_ns - max(rtt_ns, 0)
    if span <= 0:
        return None
    return (prompt_tokens - (cached_tokens or 0)) * NS / span


@dataclass(frozen=True)
class GroupEstimate:
    """Aggregate decode of concurrent streams over their common steady-state window, plus span and overlap."""

    agg_tps: float | None  # sum of per-stream decode rates inside W (headline)
    window_tps: float | None  # tokens arriving in (W_start, W_end] / |W| (measurement.md §4 wording)
    span_tps: float | None
    overlap: float | None
    window_start: int | None
    window_end: int | None
    window_tokens: int | None
    serialised: bool


def _clipped_rate(t: Sequence[int], n: Sequence[int], w0: int, w1: int) -> float | None:
    """Per-request formula on the chunks inside [w0, w1]: tokens after the first in-window chunk / time."""
    idx = [i for i, ti in enumerate(t) if w0 <= ti <= w1]
    if len(idx) < 2 or t[idx[-1]] <= t[idx[0]]:
        return None
    return sum(n[i] for i in idx[1:]) * NS / (t[idx[-1]] - t[idx[0]])


def group_aggregate(streams: Sequence[tuple[Sequence[int], Sequence[int]]]) -> GroupEstimate:
    """Aggregate decode t/s of streams that ran together (measurement.md §4).

    `streams` holds (chunk stamps, tokens per chunk) of each stream's token-bearing chunks. The steady-state
    window is W = [max_i t_first_i, min_i t_last_i]: every stream is decoding throughout it.

    Headline (`agg_tps`): the sum over streams of each stream's decode rate measured on its own chunks inside W
    (the per-request formula restricted to W). The literal "tokens arriving in W / |W|" (`window_tps`) is kept
    too, but it is biased when streams run in phase with multi-token chunks: W opens on one stream's chunk
    and closes on another's, so a neighbour's chunk lands just outside by microseconds and whole chunks drop
    out (about one chunk in 2n for two streams of n chunks: -10% at n = 5), and read coalescing on the client
    flips those boundary chunks in and out. Per-stream rates inside W have neither problem.
    Span: sum(N_i - n_first_i) / (max t_last - min t_first). If W is empty the engine ran the streams one
    after another: no concurrency aggregate exists (`serialised`).
    """
    live = [(t, n) for t, n in streams if len(t) > 0 and len(t) == len(n)]
    if len(live) != len(streams) or not live:
        return GroupEstimate(None, None, None, None, None, None, None, False)
    firsts = [t[0] for t, _ in live]
    lasts = [t[-1] for t, _ in live]
    span = max(lasts) - min(firsts)
    span_tokens = sum(sum(n) - n[0] for _, n in live)
    span_tps = span_tokens * NS / span if span > 0 and span_tokens > 0 else None
    w0, w1 = max(firsts), min(lasts)
    if w1 <= w0:
        return GroupEstimate(None, None, span_tps, (w1 - w0) / span if span > 0 else None, w0, w1, 0, True)
    tokens = 0
    for t, n in live:
        for ti, ni in zip(t, n, strict=True):
            if w0 < ti <= w1:
                tokens += ni
    rates = [_clipped_rate(t, n, w0, w1) for t, n in live]
    agg = sum(rates) if all(r is not None for r in rates) else None  # type: ignore[misc]
    return GroupEstimate(agg, tokens * NS / (w1 - w0), span_tps, (w1 - w0) / span, w0, w1, tokens, False)


def median(values: Sequence[float]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
