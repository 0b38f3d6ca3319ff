"""The latency statistics of a load level on hand-made records with known stamps
(docs/measurement.md, "Latency percentiles, SLO and goodput"): each figure exactly, percentiles against numpy,
the order-statistic interval's coverage by a seeded simulation, the SLO's verdicts and the edge cases."""

import dataclasses
import math

import numpy as np
import pytest

from labkit.measure.records import RequestRecord
from labkit.measure.summary.latency import (
    SLO,
    effective_concurrency,
    goodput,
    level_meets,
    level_span_s,
    level_stats,
    meets_slo,
    peak_concurrency,
    percentile,
    percentiles,
    quantile_interval,
    quantile_ranks,
    request_e2el,
    request_itls,
    request_tpot,
    request_ttft,
)
from labkit.measure.summary.latency import (
    attainment as slo_attainment,
)

MS = 1_000_000


def _rec(
    send_ms: float = 0,
    ttft_ms: float = 100,
    gaps_ms: tuple[float, ...] = (10, 10, 10),
    tokens: tuple[int, ...] | None = None,
    tail_ms: float = 5,
    prompt: int | None = 20,
    ok: bool = True,
) -> RequestRecord:
    """A streamed request sent at `send_ms`: its first token-bearing chunk `ttft_ms` later, then one chunk
    after each gap, carrying `tokens` (one each by default), `[DONE]` `tail_ms` after the last chunk."""
    t = [round((send_ms + ttft_ms) * MS)]
    for g in gaps_ms:
        t.append(t[-1] + round(g * MS))
    n = list(tokens) if tokens is not None else [1] * len(t)
    return RequestRecord(
        ok=ok,
        t_send=round(send_ms * MS),
        t_first=t[0],
        t_last=t[-1],
        t_end=t[-1] + round(tail_ms * MS),
        ttft_s=ttft_ms / 1000,
        output_tokens=sum(n),
        prompt_tokens=prompt,
        chunk_t=t,
        chunk_n=n,
        chunks=len(t),
    )


# ---- per request -------------------------------------------------------------------------------------------


def test_per_request_figures_from_known_stamps():
    # first token at 100 ms, chunks of 1, 2, 1 and 1 tokens 10, 20 and 30 ms apart, [DONE] 5 ms after the last
    rec = _rec(gaps_ms=(10, 20, 30), tokens=(1, 2, 1, 1), tail_ms=5)
    assert request_ttft(rec) == pytest.approx(0.100)
    assert request_e2el(rec) == pytest.approx(0.165)  # to [DONE], not to the last token (0.160)
    # TPOT: first to last token over the 4 tokens after the first
    assert request_tpot(rec) == pytest.approx(0.060 / 4)
    # the 2-token chunk gives one gap of 10 ms, not two of 5 ms
    assert request_itls(rec) == pytest.approx([0.010, 0.020, 0.030])


def test_chunks_of_one_read_give_zero_gaps():
    rec = _rec(gaps_ms=(0, 0, 40))
    assert request_itls(rec) == [0.0, 0.0, pytest.approx(0.040)]


@pytest.mark.parametrize("n", [0, 1, None])
def test_tpot_needs_a_token_after_the_first(n):
    rec = _rec(gaps_ms=())
    rec.output_tokens = n
    assert request_tpot(rec) is None
    assert request_itls(rec) == []  # one chunk: no gap


def test_missing_stamps_give_no_figure():
    rec = RequestRecord(t_send=0, output_tokens=5)
    assert request_ttft(rec) is None and request_e2el(rec) is None and request_tpot(rec) is None
    assert request_itls(rec) == []


# ---- percentiles -------------------------------------------------------------------------------------------


def test_percentile_interpolates_between_order_statistics():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)  # h = 2.7: 3 + 0.7 · (4 − 3)
    assert percentile([1.0, 2.0, 3.0, 4.0], 0) == 1.0 and percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0


def test_percentile_equals_numpy_on_random_samples():
    rng = np.random.default_rng(37)
    for _ in range(300):
        x = rng.lognormal(-3, 1, size=int(rng.integers(1, 60)))
        for p in (0, 1, 25, 50, 90, 95, 99, 99.9, 100, float(rng.uniform(0, 100))):
            assert percentile(list(x), p) == float(np.percentile(x, p)), (len(x), p)


def test_percentile_edges():
    assert percentile([], 50) is None
    assert all(percentile([0.25], p) == 0.25 for p in (0, 50, 99, 100))
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    with pytest.raises(ValueError):
        percentile([1.0], -1)


def test_level_percentiles():
    got = percentiles([float(v) for v in range(1, 101)])  # 1..100
    assert (got.n, got.p50, got.p90) == (100, 50.5, pytest.approx(90.1))
    assert (got.p95, got.p99) == (pytest.approx(95.05), pytest.approx(99.01))
    empty = percentiles([])
    assert (empty.n, empty.p50, empty.p90, empty.p95, empty.p99) == (0, None, None, None, None)


# ---- the interval of a percentile --------------------------------------------------------------------------


def _binomial_cdf(n: int, q: float, k: int) -> float:
    """P(B ≤ k) for B ~ Binomial(n, q), term by term (an independent check on quantile_ranks)."""
    return math.fsum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k + 1))


@pytest.mark.parametrize("p,least", [(50, 6), (90, 36), (95, 72), (99, 368)])
def test_fewest_samples_for_an_interval(p, least):
    assert quantile_ranks(least - 1, p) is None
    assert quantile_ranks(least, p) is not None
    assert quantile_interval([float(v) for v in range(least - 1)], p) is None


def test_six_samples_bracket_the_median_with_their_extremes():
    assert quantile_ranks(6, 50) == (1, 6, pytest.approx(1 - 2 / 64))
    got = quantile_interval([5.0, 1.0, 4.0, 2.0, 6.0, 3.0], 50)
    assert got is not None and (got.lo, got.hi, got.lo_rank, got.hi_rank) == (1.0, 6.0, 1, 6)


@pytest.mark.parametrize(
    "p,n", [(50, 6), (50, 40), (50, 1000), (90, 36), (90, 100), (95, 400), (99, 368), (99, 1000)]
)
def test_ranks_are_the_tightest_with_equal_tails(p, n):
    ranks = quantile_ranks(n, p)
    assert ranks is not None
    lo, hi, coverage = ranks
    q = p / 100
    below, above = _binomial_cdf(n, q, lo - 1), 1 - _binomial_cdf(n, q, hi - 1)  # P(B < lo), P(B ≥ hi)
    assert below <= 0.025 + 1e-12 and above <= 0.025 + 1e-12
    assert coverage == pytest.approx(1 - below - above, abs=1e-9) and coverage >= 0.95
    # one rank further in breaks a tail: P(B < lo + 1) > 2.5 %, P(B ≥ hi − 1) > 2.5 %
    assert _binomial_cdf(n, q, lo) > 0.025 and 1 - _binomial_cdf(n, q, hi - 2) > 0.025


@pytest.mark.parametrize("p,n", [(50, 40), (90, 100), (99, 500)])
def test_interval_holds_the_true_quantile_in_95_percent_of_trials(p, n):
    # 2,000 seeded trials of n exponential draws: the true p-quantile is −ln(1 − p/100)
    rng = np.random.default_rng(1000 + p)
    true = -math.log(1 - p / 100)
    ranks = quantile_ranks(n, p)
    assert ranks is not None
    lo, hi, coverage = ranks
    draws = np.sort(rng.exponential(size=(2000, n)), axis=1)
    held = (draws[:, lo - 1] <= true) & (true <= draws[:, hi - 1])
    assert held.mean() >= 0.93, (held.mean(), coverage)
    # quantile_interval reads the same order statistics off an unsorted sample
    got = quantile_interval(list(rng.permutation(draws[0])), p)
    assert got is not None and (got.lo, got.hi) == (draws[0, lo - 1], draws[0, hi - 1])


def test_interval_arguments_are_checked():
    for p in (0, 100):
        with pytest.raises(ValueError):
            quantile_ranks(100, p)
    with pytest.raises(ValueError):
        quantile_ranks(100, 50, confidence=1.0)
    assert quantile_ranks(0, 50) is None


# ---- the SLO -----------------------------------------------------------------------------------------------


def test_a_request_meets_every_bound_given_inclusively():
    rec = _rec(ttft_ms=100, gaps_ms=(10, 10, 10), tail_ms=5)  # TTFT 0.1, TPOT 0.01, E2EL 0.135
    assert meets_slo(rec, SLO(ttft_s=0.1))  # a figure on its bound meets it
    assert not meets_slo(rec, SLO(ttft_s=0.099))
    assert meets_slo(rec, SLO(ttft_s=0.2, tpot_s=0.011, e2e_s=0.135))
    assert not meets_slo(rec, SLO(ttft_s=0.2, tpot_s=0.009))
    assert not meets_slo(rec, SLO(e2e_s=0.134))
    assert meets_slo(rec, SLO())  # no bounds: every answered request


def test_a_failed_request_never_meets_and_one_token_meets_a_tpot_bound():
    assert not meets_slo(_rec(ok=False), SLO(ttft_s=10))
    assert not meets_slo(_rec(ok=False), SLO())
    one = _rec(gaps_ms=())
    assert one.output_tokens == 1 and meets_slo(one, SLO(tpot_s=0.001))
    uncounted = _rec()
    uncounted.output_tokens = None
    assert not meets_slo(uncounted, SLO(tpot_s=1.0))  # a TPOT that cannot be known fails its bound


def test_attainment_counts_failures_and_goodput_is_per_second():
    recs = [
        _rec(ttft_ms=100),
        _rec(ttft_ms=150),
        _rec(ttft_ms=300),  # too slow
        _rec(ttft_ms=50, ok=False),  # failed
    ]
    slo = SLO(ttft_s=0.2)
    assert slo_attainment(recs, slo) == 0.5
    assert goodput(recs, slo, 2.0) == 1.0
    assert goodput(recs, slo, 0.0) is None and goodput(recs, slo, None) is None
    assert slo_attainment([], slo) is None
    assert slo_attainment(recs[3:], slo) == 0.0


def test_a_level_holds_the_slo_at_its_percentile():
    recs = [_rec(ttft_ms=float(ms)) for ms in range(1, 101)]  # TTFT 1..100 ms: p99 99.01 ms, p50 50.5 ms
    assert level_meets(recs, SLO(ttft_s=0.1))
    assert not level_meets(recs, SLO(ttft_s=0.099))
    assert level_meets(recs, SLO(ttft_s=0.051, percentile=50))
    assert not level_meets(recs, SLO(ttft_s=0.050, percentile=50))
    # failures stay out of the percentiles (attainment counts them), but a level of failures holds nothing
    assert level_meets([*recs, _rec(ttft_ms=900, ok=False)], SLO(ttft_s=0.1))
    assert not level_meets([_rec(ok=False)], SLO(ttft_s=10))
    assert not level_meets([], SLO(ttft_s=10))
    assert level_meets([_rec(gaps_ms=())], SLO(tpot_s=0.001))  # only one-token requests: no TPOT to exceed


@pytest.mark.parametrize(
    "kwargs", [{"percentile": 0}, {"percentile": 101}, {"ttft_s": 0}, {"tpot_s": -1}, {"e2e_s": float("nan")}]
)
def test_slo_refuses_what_no_request_could_be_judged_by(kwargs):
    with pytest.raises(ValueError):
        SLO(**kwargs)


# ---- the level ---------------------------------------------------------------------------------------------


def _level() -> list[RequestRecord]:
    """A: sent at 0, first token 100 ms, 10 tokens ending 1000 ms. B: sent at 550 ms, 150 ms TTFT, 5 tokens
    ending 1500 ms. C: failed, 400..600 ms. D: sent at 1000 ms as A ends, 3 tokens ending 1300 ms."""
    a = _rec(send_ms=0, ttft_ms=100, gaps_ms=(100,) * 9, tail_ms=0, prompt=20)
    b = _rec(send_ms=550, ttft_ms=150, gaps_ms=(200,) * 4, tail_ms=0, prompt=30)
    c = _rec(send_ms=400, ttft_ms=100, gaps_ms=(50, 50), tail_ms=0, ok=False)
    d = _rec(send_ms=1000, ttft_ms=100, gaps_ms=(100, 100), tail_ms=0, prompt=10)
    return [a, b, c, d]


def test_level_span_and_concurrency():
    recs = _level()
    assert level_span_s(recs) == pytest.approx(1.5)  # first send (A, 0) to last end (B, 1.5 s)
    # Σ durations: A 1.0 + B 0.95 + C 0.2 + D 0.3 = 2.45 s over 1.5 s
    assert effective_concurrency(recs) == pytest.approx(2.45 / 1.5)
    # at 550..600 ms A, B and C are in flight; D starts as A ends, so B and D make 2 after that
    assert peak_concurrency(recs) == 3
    assert peak_concurrency([recs[0], recs[3]]) == 1  # back to back: [0, 1.0) and [1.0, 1.3)


def test_a_levels_span_sums_its_passes_not_the_levels_run_between_them():
    """A capacity search's boundary level runs again after other levels (and a level runs once per repetition):
    its rates are per second of its own passes, not of the time other levels took between them."""
    first = _level()
    later = round(10_000 * MS)  # the pass again 10 s later
    again = [
        dataclasses.replace(
            r,
            t_send=r.t_send + later,
            t_first=r.t_first + later,
            t_last=r.t_last + later,
            t_end=r.t_end + later,
            chunk_t=[x + later for x in r.chunk_t],
            load_pass=1,
        )
        for r in first
    ]
    assert level_span_s(first + again) == pytest.approx(3.0)  # 1.5 s each, the 8.5 s between left out
    other_rep = [dataclasses.replace(r, rep=1) for r in again]
    assert level_span_s(first + other_rep) == pytest.approx(3.0)
    assert level_stats(first + again).output_tps == pytest.approx(2 * (10 + 5 + 3) / 3.0)


def test_level_stats_from_known_stamps():
    got = level_stats(_level(), SLO(ttft_s=0.12))
    assert (got.n_ok, got.n_failed, got.span_s) == (3, 1, pytest.approx(1.5))
    assert got.ttft.n == 3 and got.ttft.p50 == pytest.approx(0.1) and got.ttft.p99 == pytest.approx(0.149)
    assert got.e2el.n == 3 and got.e2el.p50 == pytest.approx(0.95) and got.e2el.p90 == pytest.approx(0.99)
    # TPOT: A 0.9/9 = 0.1, B 0.8/4 = 0.2, D 0.2/2 = 0.1
    assert got.tpot.n == 3 and got.tpot.p50 == pytest.approx(0.1) and got.tpot.p99 == pytest.approx(0.198)
    # ITL pooled over the answered requests: 9 + 4 + 2 gaps, the failed request's 2 left out
    assert got.itl.n == 15 and got.itl.p50 == pytest.approx(0.1) and got.itl.p95 == pytest.approx(0.2)
    assert got.request_rate == pytest.approx(3 / 1.5)
    assert got.output_tps == pytest.approx((10 + 5 + 3) / 1.5)
    assert got.total_tps == pytest.approx((20 + 30 + 10 + 10 + 5 + 3) / 1.5)
    assert got.effective_concurrency == pytest.approx(2.45 / 1.5) and got.peak_concurrency == 3
    # TTFT ≤ 0.12 s: A and D meet, B (0.15 s) does not, C failed; the level's p99 TTFT is 0.149 s
    assert got.attainment == 0.5 and got.goodput == pytest.approx(2 / 1.5) and got.slo_met is False


def test_level_stats_without_an_slo_or_a_count():
    recs = _level()
    recs[1].prompt_tokens = None
    got = level_stats(recs)
    assert got.attainment is None and got.goodput is None and got.slo_met is None
    assert got.total_tps is None and got.output_tps == pytest.approx(18 / 1.5)


def test_an_empty_level_and_a_level_of_failures():
    empty = level_stats([], SLO(ttft_s=1.0))
    assert (empty.n_ok, empty.n_failed, empty.span_s, empty.peak_concurrency) == (0, 0, None, 0)
    assert empty.ttft.p50 is None and empty.request_rate is None and empty.effective_concurrency is None
    assert empty.attainment is None and empty.goodput is None and empty.slo_met is False
    failed = level_stats([_rec(ok=False), _rec(send_ms=50, ok=False)], SLO(ttft_s=1.0))
    assert (failed.n_ok, failed.n_failed) == (0, 2) and failed.span_s == pytest.approx(0.185)
    assert failed.ttft.n == 0 and failed.itl.p99 is None and failed.request_rate == 0.0
    assert failed.output_tps == 0.0 and failed.attainment == 0.0 and failed.goodput == 0.0
    assert failed.slo_met is False and failed.peak_concurrency == 2


def test_a_level_of_one_request_of_one_token():
    got = level_stats([_rec(gaps_ms=(), tail_ms=20)], SLO(ttft_s=0.1, tpot_s=0.001))
    assert (got.n_ok, got.ttft.n, got.tpot.n, got.itl.n, got.e2el.n) == (1, 1, 0, 0, 1)
    assert got.ttft.p50 == got.ttft.p99 == pytest.approx(0.1) and got.e2el.p95 == pytest.approx(0.12)
    assert got.span_s == pytest.approx(0.12) and got.request_rate == pytest.approx(1 / 0.12)
    assert got.effective_concurrency == pytest.approx(1.0) and got.peak_concurrency == 1
    assert got.attainment == 1.0 and got.slo_met is True  # one token: no TPOT to exceed
