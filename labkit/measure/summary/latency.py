"""Latency statistics of one load level: each request's TTFT, TPOT, ITL gaps and E2EL, their percentiles
with a distribution-free interval, SLO attainment and goodput, and the level's rates and concurrency.

docs/measurement.md, "Latency percentiles, SLO and goodput" defines each figure and says where it matches
`vllm bench serve`. Pure: records in, numbers out, no I/O. Nothing here picks records: the caller hands over
the requests of one level (warmups left out) with the failed ones, since attainment counts them. Stamps are
the records' integer nanoseconds (labkit/measure/records.py); every time here is in seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise

from labkit.measure.records import RequestRecord
from labkit.measure.request.timing import NS

CONFIDENCE = 0.95  # of a quantile's interval (quantile_interval)
LEVEL_PERCENTILES = (50.0, 90.0, 95.0, 99.0)  # what LevelStats reports of each figure


# ---- per request -------------------------------------------------------------------------------------------


def _seconds(start: int | None, end: int | None) -> float | None:
    return None if start is None or end is None else (end - start) / NS


def request_ttft(rec: RequestRecord) -> float | None:
    """t_first − t_send: up to the first chunk that carries a generated token of any kind, reasoning or answer
    (labkit's TTFT, the record's `ttft_s`), not to a role prelude without tokens."""
    return _seconds(rec.t_send, rec.t_first)


def request_e2el(rec: RequestRecord) -> float | None:
    """t_end − t_send: the request as its client waits for it, up to the read that brought `[DONE]` (or the
    stream's close), so the usage chunk after the last token is inside it. vLLM's latency ends earlier, at its
    last chunk with choices (t_last); SGLang's bench and guidellm end at the stream's end, as here."""
    return _seconds(rec.t_send, rec.t_end)


def request_tpot(rec: RequestRecord) -> float | None:
    """(t_last − t_first) / (N − 1): the time from the first token to the last, spread over the N − 1 tokens
    after the first. vLLM's (latency − TTFT) / (N − 1) on labkit's stamps: vLLM's latency ends at the last
    chunk that has choices, which is t_last, not at the stream's end. None when N ≤ 1 (no token after the
    first), N is unknown or a stamp is missing."""
    n = rec.output_tokens
    if n is None or n <= 1 or rec.t_first is None or rec.t_last is None:
        return None
    return (rec.t_last - rec.t_first) / NS / (n - 1)


def request_itls(rec: RequestRecord) -> list[float]:
    """The gaps between successive token-bearing chunks (`chunk_t`), one per chunk after the first, as vLLM
    counts inter-token latency: a chunk that carried several tokens (`chunk_n` > 1, speculative decoding)
    gives one gap, not one per token, and chunks that one network read delivered share its stamp, so they
    give a gap of 0. Empty for fewer than two chunks."""
    return [(b - a) / NS for a, b in pairwise(rec.chunk_t)]


# ---- percentiles and their intervals -----------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0 ≤ p ≤ 100) by linear interpolation between order statistics, numpy's default
    (Hyndman and Fan's type 7): the sorted x_0 ≤ … ≤ x_(n−1) read at h = (n − 1)·p/100 as
    x_⌊h⌋ + (h − ⌊h⌋)·(x_(⌊h⌋+1) − x_⌊h⌋). Computed in numpy's order of operations, so a figure equals
    `vllm bench serve`'s on the same values. None without values."""
    if not 0 <= p <= 100:
        raise ValueError(f"a percentile lies in [0, 100], got {p!r}")
    if not values:
        return None
    x = sorted(values)
    h = (len(x) - 1) * (p / 100)
    if h >= len(x) - 1:
        return float(x[-1])
    i = math.floor(h)
    g = h - i
    a, b = float(x[i]), float(x[i + 1])
    d = b - a
    return b - d * (1 - g) if g >= 0.5 else a + d * g  # numpy's lerp: exact at both ends


def _log_binomial(n: int, k: int, log_q: float, log_1q: float) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q + (n - k) * log_1q


def quantile_ranks(n: int, p: float, confidence: float = CONFIDENCE) -> tuple[int, int, float] | None:
    """The 1-based ranks (l, u) of the order statistics x_(l) ≤ x_(u) of n samples that hold the p-th
    percentile ξ of any continuous distribution with probability ≥ `confidence`, and that probability.

    The count B of samples at or below ξ is Binomial(n, p/100), and x_(l) ≤ ξ < x_(u) exactly when
    l ≤ B ≤ u − 1. The tails are equal: l is the largest rank with P(B < l) ≤ α/2, u the smallest with
    P(B ≥ u) ≤ α/2 (α = 1 − confidence), so the coverage 1 − P(B < l) − P(B ≥ u) ≥ confidence whatever the
    distribution. None when a tail cannot be met inside the sample: at 95 % that needs n ≥ 6 for p50, 36 for
    p90, 72 for p95 and 368 for p99 (for p99, 0.99^n ≤ 0.025: the sample's largest value must lie above ξ
    often enough)."""
    if not 0 < p < 100:
        raise ValueError(f"an interval needs a percentile in (0, 100), got {p!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"a confidence lies in (0, 1), got {confidence!r}")
    if n < 1:
        return None
    q, tail = p / 100, (1 - confidence) / 2
    log_q, log_1q = math.log(q), math.log1p(-q)
    below, lo = 0.0, 0  # P(B < lo) = below
    for k in range(n + 1):
        mass = math.exp(_log_binomial(n, k, log_q, log_1q))
        if below + mass > tail:
            break
        below, lo = below + mass, k + 1
    above, hi = 0.0, n + 1  # P(B ≥ hi) = above
    for k in range(n, -1, -1):
        mass = math.exp(_log_binomial(n, k, log_q, log_1q))
        if above + mass > tail:
            break
        above, hi = above + mass, k
    if lo < 1 or hi > n:
        return None
    return lo, hi, 1 - below - above


@dataclass(frozen=True)
class QuantileInterval:
    """A distribution-free interval for a percentile: the sorted sample's values at ranks `lo_rank` and
    `hi_rank` (1-based), which hold the true percentile with probability `coverage` (quantile_ranks)."""

    lo: float
    hi: float
    lo_rank: int
    hi_rank: int
    coverage: float


def quantile_interval(
    values: Sequence[float], p: float, confidence: float = CONFIDENCE
) -> QuantileInterval | None:
    """The interval of quantile_ranks on these values; None when there are too few of them. It assumes
    independent samples: right for one figure per request (TTFT, TPOT, E2EL), too narrow for the ITL gaps
    pooled over requests, whose gaps within one request move together."""
    ranks = quantile_ranks(len(values), p, confidence)
    if ranks is None:
        return None
    lo, hi, coverage = ranks
    x = sorted(values)
    return QuantileInterval(float(x[lo - 1]), float(x[hi - 1]), lo, hi, coverage)


# ---- service-level objectives ------------------------------------------------------------------------------

Figure = Callable[[RequestRecord], float | None]  # one request's figure in seconds, None when it has none


@dataclass(frozen=True)
class SLO:
    """Latency bounds in seconds (None: not bounded) and the percentile a level's figures are held to them
    at (level_meets; p99 by default, as MLPerf's server scenarios bound TTFT and TPOT). Bounds are
    inclusive, as vLLM's goodput takes them. An SLO without bounds is met by every answered request."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentile: float = 99.0

    def __post_init__(self) -> None:
        if not 0 < self.percentile <= 100:
            raise ValueError(f"an SLO percentile lies in (0, 100], got {self.percentile!r}")
        for name, bound, _ in slo_bounds(self):
            if not bound > 0:  # NaN too
                raise ValueError(f"an SLO bound is a positive number of seconds, got {name}={bound!r}")


def slo_bounds(slo: SLO) -> list[tuple[str, float, Figure]]:
    """(name, bound, the request's figure) for each bound the SLO gives."""
    given = (
        ("ttft", slo.ttft_s, request_ttft),
        ("tpot", slo.tpot_s, request_tpot),
        ("e2e", slo.e2e_s, request_e2el),
    )
    return [(name, bound, figure) for name, bound, figure in given if bound is not None]


def meets_slo(rec: RequestRecord, slo: SLO) -> bool:
    """Whether one request met every bound the SLO gives. A failed request never does, and a missing figure
    fails its bound, except the TPOT of a request of one output token: no token came after the first to be
    late (vLLM counts its TPOT as 0 for goodput)."""
    if not rec.ok:
        return False
    for name, bound, figure in slo_bounds(slo):
        value = figure(rec)
        if value is None:
            if name == "tpot" and rec.output_tokens is not None and rec.output_tokens <= 1:
                continue
            return False
        if value > bound:
            return False
    return True


def attainment(records: Sequence[RequestRecord], slo: SLO) -> float | None:
    """The share of the level's requests that met the SLO, the failed ones counted (as not meeting it); None
    for no requests."""
    if not records:
        return None
    return sum(meets_slo(r, slo) for r in records) / len(records)


def goodput(records: Sequence[RequestRecord], slo: SLO, duration_s: float | None) -> float | None:
    """Requests per second that met the SLO: their count over the level's duration (LevelStats uses its span,
    level_span_s). None without a positive duration."""
    if duration_s is None or not duration_s > 0:
        return None
    return sum(meets_slo(r, slo) for r in records) / duration_s


def level_meets(records: Sequence[RequestRecord], slo: SLO) -> bool:
    """Whether the level held the SLO: for each bound given, the SLO's percentile of that figure over the
    answered requests is within it. Failures do not enter the percentiles (attainment counts them), so a level
    without an answered request does not hold it; a TPOT bound holds when no answered request has a TPOT
    (every one had one output token)."""
    ok = [r for r in records if r.ok]
    if not ok:
        return False
    for name, bound, figure in slo_bounds(slo):
        got = [v for v in map(figure, ok) if v is not None]
        if not got:
            if name == "tpot" and all(r.output_tokens is not None and r.output_tokens <= 1 for r in ok):
                continue
            return False
        value = percentile(got, slo.percentile)
        if value is None or value > bound:
            return False
    return True


# ---- the level ---------------------------------------------------------------------------------------------


def _intervals(records: Sequence[RequestRecord]) -> list[tuple[int, int]]:
    """[t_send, t_end) of every request with both stamps, failed ones too: they held a connection as long."""
    return [(r.t_send, r.t_end) for r in records if r.t_end is not None]


def level_span_s(records: Sequence[RequestRecord]) -> float | None:
    """First send to last end over the level's requests, failed ones included (vLLM's duration likewise covers
    its failed requests), summed over the level's passes (each repetition's, and a capacity search's boundary
    passes): the time between two passes was spent on other levels; None without a positive span."""
    passes: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for r in records:
        if r.t_end is not None:
            passes.setdefault((r.rep, r.load_pass), []).append((r.t_send, r.t_end))
    span = sum(max(b for _, b in p) - min(a for a, _ in p) for p in passes.values())
    return span / NS if span > 0 else None


def effective_concurrency(records: Sequence[RequestRecord]) -> float | None:
    """Requests in flight on average over the level's span: Σ (t_end − t_send) / span, failed ones included
    (Little's law on the client's stamps). None without a span."""
    span = level_span_s(records)
    if span is None:
        return None
    return sum(b - a for a, b in _intervals(records)) / NS / span


def peak_concurrency(records: Sequence[RequestRecord]) -> int:
    """The most requests in flight at one instant, each over [t_send, t_end): one that ends as another is sent
    does not overlap it. 0 for none."""
    events = sorted([(b, -1) for _, b in _intervals(records)] + [(a, +1) for a, _ in _intervals(records)])
    peak = now = 0
    for _, step in events:  # at one stamp the ends (-1) sort before the sends
        now += step
        peak = max(peak, now)
    return peak


@dataclass(frozen=True)
class Percentiles:
    """p50, p90, p95 and p99 of one figure over a level (percentile), and how many values they are of."""

    n: int
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None


def percentiles(values: Sequence[float]) -> Percentiles:
    """The LEVEL_PERCENTILES of these values."""
    p50, p90, p95, p99 = (percentile(values, p) for p in LEVEL_PERCENTILES)
    return Percentiles(len(values), p50, p90, p95, p99)


@dataclass(frozen=True)
class LevelStats:
    """One load level's latency figures. Percentiles and rates are over the answered requests only; the span,
    the concurrencies and the SLO's attainment count the failed ones too. Rates are per second of the span
    (first send to last end, level_span_s); None without a span, and a token rate is None when an answered
    request lacks its count. The SLO's figures are None when no SLO was given."""

    n_ok: int
    n_failed: int
    span_s: float | None
    ttft: Percentiles
    itl: Percentiles  # the gaps of every answered request, pooled
    tpot: Percentiles  # of the requests with N > 1
    e2el: Percentiles
    request_rate: float | None  # answered requests / span
    output_tps: float | None  # Σ N / span
    total_tps: float | None  # Σ (P + N) / span, P the prompt with its cached tokens
    effective_concurrency: float | None
    peak_concurrency: int
    attainment: float | None = None
    goodput: float | None = None
    slo_met: bool | None = None


def _per_span(total: int | None, span: float | None) -> float | None:
    return None if total is None or span is None else total / span


def _token_sum(values: Sequence[int | None]) -> int | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def level_stats(records: Sequence[RequestRecord], slo: SLO | None = None) -> LevelStats:
    """The figures of one load level from its requests (failed ones included), with the SLO's when given."""
    ok = [r for r in records if r.ok]
    span = level_span_s(records)

    def figure(f: Figure) -> Percentiles:
        return percentiles([v for v in map(f, ok) if v is not None])

    return LevelStats(
        n_ok=len(ok),
        n_failed=len(records) - len(ok),
        span_s=span,
        ttft=figure(request_ttft),
        itl=percentiles([g for r in ok for g in request_itls(r)]),
        tpot=figure(request_tpot),
        e2el=figure(request_e2el),
        request_rate=_per_span(len(ok), span),
        output_tps=_per_span(_token_sum([r.output_tokens for r in ok]), span),
        total_tps=_per_span(_token_sum([r.prompt_tokens for r in ok] + [r.output_tokens for r in ok]), span),
        effective_concurrency=effective_concurrency(records),
        peak_concurrency=peak_concurrency(records),
        attainment=attainment(records, slo) if slo is not None else None,
        goodput=goodput(records, slo, span) if slo is not None else None,
        slo_met=level_meets(records, slo) if slo is not None else None,
    )
