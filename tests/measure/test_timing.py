"""Speed formulas on hand-made timelines (docs/measurement.md, "Decode per request" to "Prefill and TTFT")."""

import pytest

from labkit.measure import median
from labkit.measure.request.timing import NS, decode_tps, group_aggregate, prefill_tps

MS = 1_000_000


def test_decode_excludes_first_chunk_and_tail():
    # 1 token at t=100 ms, then 99 tokens over 990 ms: 100 t/s; a [DONE] tail at any time changes nothing.
    assert decode_tps(100, 1, 100 * MS, 1090 * MS) == pytest.approx(100.0)


def test_decode_with_multi_token_first_chunk():
    # spec decoding: the first chunk already carries 3 tokens
    assert decode_tps(63, 3, 0, NS) == pytest.approx(60.0)


@pytest.mark.parametrize(
    "args", [(None, 1, 0, NS), (10, None, 0, NS), (10, 1, NS, NS), (1, 1, 0, NS), (10, 1, None, 5)]
)
def test_decode_undefined(args):
    assert decode_tps(*args) is None


def test_prefill_rate_subtracts_cache_and_rtt():
    assert prefill_tps(4096, 0, 2 * NS) == pytest.approx(2048.0)
    assert prefill_tps(4096, 96, 2 * NS + 10 * MS, rtt_ns=10 * MS) == pytest.approx(2000.0)
    assert prefill_tps(4096, 0, 5 * MS, rtt_ns=10 * MS) is None


def _stream(t0_ms, n_chunks, every_ms, tokens=1, first=1):
    t = [(t0_ms + i * every_ms) * MS for i in range(n_chunks)]
    return t, [first] + [tokens] * (n_chunks - 1)


def test_group_steady_state_window_two_lockstep_streams():
    a = _stream(100, 101, 10)  # 100 t/s from 100 ms to 1100 ms
    b = _stream(150, 101, 10)  # same rate, starts 50 ms later
    est = group_aggregate([a, b])
    assert not est.serialised
    assert est.window_start == 150 * MS and est.window_end == 1100 * MS
    assert est.agg_tps == pytest.approx(200.0, rel=0.02)
    # span estimator: 200 tokens over 1050 ms
    assert est.span_tps == pytest.approx(200 / 1.05)
    assert est.overlap == pytest.approx(950 / 1050)


def test_group_counts_tokens_not_chunks():
    a = _stream(0, 21, 50, tokens=5, first=5)  # 5-token chunks every 50 ms: 100 t/s
    b = _stream(0, 21, 50, tokens=5, first=5)
    est = group_aggregate([a, b])
    assert est.agg_tps == pytest.approx(200.0)
    assert est.window_tokens == 200


def test_group_serialised_streams_have_no_aggregate():
    a = _stream(0, 11, 10)
    b = _stream(200, 11, 10)  # starts after a finished (llama-cpp-python serialises)
    est = group_aggregate([a, b])
    assert est.serialised and est.agg_tps is None
    assert est.overlap < 0


def test_group_with_an_empty_stream_is_undefined():
    est = group_aggregate([_stream(0, 11, 10), ([], [])])
    assert est.agg_tps is None and est.span_tps is None


def test_median():
    assert median([3, 1, 2]) == 2
    assert median([4, 1, 3, 2]) == 2.5
    assert median([]) is None


def test_in_phase_chunky_streams_agg_is_exact_where_window_count_is_not():
    # two streams of 5 chunks x 4 tokens, 100 ms apart (40 t/s each); B runs 40 us behind A (serial prefill)
    a = ([i * 100 * MS for i in range(5)], [1, 4, 4, 4, 4])
    b = ([i * 100 * MS + 40_000 for i in range(5)], [1, 4, 4, 4, 4])
    est = group_aggregate([a, b])
    assert est.agg_tps == pytest.approx(80.0, rel=1e-3)
    # B's last chunk lands 40 us after W closes: a whole chunk drops out of the window count
    assert est.window_tps == pytest.approx(28 / 0.39996, rel=1e-6)
    assert est.window_tps < 0.9 * 80


def test_agg_survives_client_read_coalescing():
    # the client read A's and B's last chunks in one network read: same stamp; the estimate must not jump
    a = ([i * 100 * MS for i in range(5)], [1, 4, 4, 4, 4])
    b = ([i * 100 * MS + 40_000 for i in range(4)] + [400 * MS], [1, 4, 4, 4, 4])
    assert group_aggregate([a, b]).agg_tps == pytest.approx(80.0, rel=1e-3)


def test_cumulative_tokens_spreads_chunks():
    from labkit.measure.request.timing import cumulative_tokens

    t, n = [0, 100, 200], [1, 4, 2]
    assert cumulative_tokens(t, n, -1) == 0
    assert cumulative_tokens(t, n, 0) == 1
    assert cumulative_tokens(t, n, 50) == pytest.approx(3.0)
    assert cumulative_tokens(t, n, 150) == pytest.approx(6.0)
    assert cumulative_tokens(t, n, 500) == 7


def test_agg_is_continuous_in_the_window_edge():
    # random-sized chunks in phase: moving B's last chunk across A's last by 2 us changes agg by ~nothing
    a = ([i * 100 * MS for i in range(6)], [1, 4, 2, 3, 1, 4])
    b1 = ([i * 100 * MS + 40_000 for i in range(6)], [1, 2, 4, 1, 3, 4])
    b2 = (b1[0][:-1] + [500 * MS - 1_000], b1[1])
    e1, e2 = group_aggregate([a, b1]).agg_tps, group_aggregate([a, b2]).agg_tps
    assert e1 == pytest.approx(e2, rel=1e-3)
    assert e1 == pytest.approx(56.0, rel=1e-3)  # 56 tokens after the first chunks over 500 ms


def test_decode_window_groups_back_to_back_chunks_into_arrivals():
    from labkit.measure.request.timing import decode_window

    us = 1000
    # first token, two more read 20 us later (same socket read), then one token every 10 ms
    t = [0, 20 * us, 40 * us] + [40 * us + i * 10 * MS for i in range(1, 11)]
    w = decode_window(t, [1] * len(t), 13)
    assert (w.n_first, w.t_start, w.window_tokens, w.burst_tokens) == (3, 40 * us, 10, 0)
    # the last 8 tokens land back to back: a reader that fell behind
    t = [i * 10 * MS for i in range(3)] + [30 * MS + i * 30 * us for i in range(8)]
    w = decode_window(t, [1] * len(t), 11)
    assert (w.n_first, w.window_tokens, w.burst_tokens) == (1, 10, 8) and w.burst_share == 0.8


def test_decode_window_counts_a_multi_token_chunk_as_one_arrival_not_a_burst():
    from labkit.measure.request.timing import decode_window

    # spec decoding: one chunk of 4 tokens every 10 ms is the engine's own batching, never a burst
    t = [i * 10 * MS for i in range(6)]
    w = decode_window(t, [4] * 6, 24)
    assert (w.n_first, w.window_tokens, w.burst_tokens) == (4, 20, 0)
