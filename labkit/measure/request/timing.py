"""Speed formulas on stream timelines (docs/measurement.md, "Decode per request" to "Prefill and TTFT"). Pure functions: stamps in, numbers out.

Every stamp is an integer of nanoseconds from one monotonic clock (`time.perf_counter_ns`). A stream's
token-bearing chunks are given as two parallel lists: arrival stamps and tokens per chunk. Decode ends at the
last token-bearing chunk, never at the usage chunk or `[DONE]`, and excludes the first chunk (prefill + first
sampling), so `decode_tps = (N - n_first) / (t_last - t_first)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

NS = 1_000_000_000


def decode_tps(
    n_tokens: int | None, n_first: int | None, t_first: int | None, t_last: int | None
) -> float | None:
    """Per-request decode rate; None when there is no interval to divide by (one chunk, or unknown counts)."""
    if n_tokens is None or n_first is None or t_first is None or t_last is None:
        return None
    if t_last <= t_first or n_tokens - n_first <= 0:
        return None
    return (n_tokens - n_first) * NS / (t_last - t_first)


BURST_GAP_NS = 100_000  # chunks stamped closer than this were already waiting in the client's buffer


@dataclass(frozen=True)
class DecodeWindow:
    """How a stream's token-bearing chunks reached the client, for the per-request decode formula.

    An *arrival* is a run of chunks stamped less than BURST_GAP_NS apart: the reader found them already
    buffered (one socket read split into several HTTP chunks, or a reader that fell behind), so only the
    arrival's last stamp says when they got here. The window opens after the first arrival: its tokens
    (`n_first`) are excluded like the first chunk, so chunks that queued up behind a late first read cannot
    inflate the rate. `burst_tokens` counts window tokens that came in arrivals of two or more chunks."""

    n_first: int
    t_start: int  # last stamp of the first arrival
    window_tokens: int  # N - n_first
    burst_tokens: int

    @property
    def burst_share(self) -> float:
        return self.burst_tokens / self.window_tokens if self.window_tokens > 0 else 1.0


def arrivals(t: Sequence[int], n: Sequence[int], gap: int = BURST_GAP_NS) -> list[tuple[int, int, int]]:
    """(last stamp, tokens, chunks) of each arrival: a run of chunks stamped less than `gap` apart (pure)."""
    groups: list[tuple[int, int, int]] = []
    for ti, ni in zip(t, n, strict=True):
        if groups and ti - groups[-1][0] < gap:
            _, tokens, chunks = groups[-1]
            groups[-1] = (ti, tokens + ni, chunks + 1)
        else:
            groups.append((ti, ni, 1))
    return groups


def decode_window(t: Sequence[int], n: Sequence[int], n_tokens: int, gap: int = BURST_GAP_NS) -> DecodeWindow:
    """The decode window of a stream of `n_tokens` tokens from its chunk stamps `t` and tokens per chunk `n`."""
    groups = arrivals(t, n, gap)
    t_start, n_first, _ = groups[0]
    burst = sum(tokens for _, tokens, chunks in groups[1:] if chunks > 1)
    return DecodeWindow(n_first, t_start, n_tokens - n_first, burst)


def first_arrival_merged(
    t: Sequence[int], n: Sequence[int], gap: int = BURST_GAP_NS
) -> tuple[list[int], list[int]]:
    """The stream with its first arrival folded into one chunk (its last stamp, its tokens), so a group's
    window opens where each stream's per-request decode window does (`decode_window`)."""
    if not t:
        return list(t), list(n)
    last, tokens, k = arrivals(t, n, gap)[0]
    return [last, *t[k:]], [tokens, *n[k:]]


def prefill_tps(
    prompt_tokens: int | None, cached_tokens: int | None, ttft_ns: int | None, rtt_ns: int = 0
) -> float | None:
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
    window_tps: (
        float | None
    )  # tokens arriving in (W_start, W_end] / |W| (docs/measurement.md, "Aggregate decode at cK")
    span_tps: float | None
    overlap: float | None
    window_start: int | None
    window_end: int | None
    window_tokens: int | None
    serialised: bool


def cumulative_tokens(t: Sequence[int], n: Sequence[int], at: int) -> float:
    """Tokens a stream had produced by time `at`, each chunk's tokens spread evenly over the interval since the
    previous chunk (the first chunk's tokens count at its own stamp). Continuous in `at`, so a window edge that
    moves by a microsecond moves the count by a microsecond's worth of tokens, never by a whole chunk."""
    if at < t[0]:
        return 0.0
    total = float(n[0])
    for k in range(1, len(t)):
        if at >= t[k]:
            total += n[k]
            continue
        width = t[k] - t[k - 1]
        return total + (n[k] * (at - t[k - 1]) / width if width > 0 else 0.0)
    return total


def group_aggregate(streams: Sequence[tuple[Sequence[int], Sequence[int]]]) -> GroupEstimate:
    """Aggregate decode t/s of streams that ran together (docs/measurement.md, "Aggregate decode at cK").

    `streams` holds (chunk stamps, tokens per chunk) of each stream's token-bearing chunks. The steady-state
    window is W = [max_i t_first_i, min_i t_last_i]: every stream is decoding throughout it.

    Headline (`agg_tps`): tokens produced by all streams inside W / |W|, with each chunk's tokens spread over the
    interval since its stream's previous chunk (`cumulative_tokens`). The literal count of chunks arriving
    in (W_start, W_end] (`window_tps`) is kept too, but it jumps by whole chunks at the edges: W opens on one
    stream's chunk and closes on another's, and in-phase streams have their neighbour's chunk microseconds
    away — just outside on the server, maybe inside on the client after two reads coalesce. Two streams of n
    chunks lose about one chunk in 2n (-10% at n = 5). The spread count is continuous at the edges.
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
    spread = sum(cumulative_tokens(t, n, w1) - cumulative_tokens(t, n, w0) for t, n in live)
    return GroupEstimate(
        spread * NS / (w1 - w0), tokens * NS / (w1 - w0), span_tps, (w1 - w0) / span, w0, w1, tokens, False
    )


def median(values: Sequence[float | None]) -> float | None:
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    mid = len(vals) // 2
    return vals[mid] if len(vals) % 2 else (vals[mid - 1] + vals[mid]) / 2
