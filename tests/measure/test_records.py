"""The pure record builder (validity rules, flags) and the lab-note table, on hand-made streams."""

import pytest

from labkit.measure import RunSummary, render
from labkit.measure.request.recording import make_record
from labkit.measure.request.sse import StreamResult
from labkit.measure.summary.text import fmt_range, fmt_rate, rows

MS = 1_000_000


def _res(n=10, per_chunk=1, finish="length", prompt=20, cached=0, error=""):
    chunks = n // per_chunk
    t = [100 * MS + i * 10 * MS for i in range(chunks)]
    return StreamResult(
        t_send=0,
        t_hdr=MS,
        t_chunk1=90 * MS,
        t_first=t[0],
        t_content=t[0],
        t_last=t[-1],
        t_end=t[-1] + 5 * MS,
        chunk_t=t,
        chunk_n=[per_chunk] * chunks,
        output_tokens=n,
        output_tokens_source="continuous_usage",
        prompt_tokens=prompt,
        cached_tokens=cached,
        finish_reason=finish,
        http_status=200,
        error=error,
    )


def test_good_decode_record():
    rec = make_record(_res(), t_origin=0, rtt_ns=0, phase="decode", requested=10)
    assert rec.ok and not rec.flags
    assert rec.decode_tps == pytest.approx(100.0)  # 9 tokens over 90 ms
    assert rec.ttft_s == pytest.approx(0.1) and rec.ttfr_s == pytest.approx(0.09)


def test_stamps_are_relative_to_the_run_origin():
    rec = make_record(_res(), t_origin=50 * MS, rtt_ns=0, phase="decode", requested=10)
    assert rec.t_first == 50 * MS and rec.chunk_t[0] == 50 * MS and rec.t_send == -50 * MS


@pytest.mark.parametrize(
    "res,why",
    [
        (_res(n=8), "short: 8 of 10"),
        (_res(finish="stop"), "finish_reason 'stop'"),
        (_res(error="HTTP 500: boom"), "HTTP 500"),
    ],
)
def test_failed_records(res, why):
    rec = make_record(res, t_origin=0, rtt_ns=0, phase="decode", requested=10)
    assert not rec.ok and why in rec.error


def test_prefill_record_rate_rtt_and_flags():
    res = _res(n=1, prompt=4000, cached=0)
    rec = make_record(res, t_origin=0, rtt_ns=MS, phase="prefill", requested=1, prompt_target=4000)
    assert rec.prefill_tps == pytest.approx(4000 / 0.099) and rec.prefill_tps_raw == pytest.approx(40000.0)
    off = make_record(
        _res(n=1, prompt=4100), t_origin=0, rtt_ns=0, phase="prefill", requested=1, prompt_target=4000
    )
    assert "prompt-length-off" in off.flags
    hit = make_record(
        _res(n=1, prompt=4000, cached=3968),
        t_origin=0,
        rtt_ns=0,
        phase="prefill",
        requested=1,
        prompt_target=4000,
    )
    assert "prefix-cache-hit" in hit.flags and hit.prefill_tps == pytest.approx(32 / 0.1)


def test_prompt_count_from_counter_only_without_usage():
    res = _res(n=1, prompt=None)
    rec = make_record(
        res,
        t_origin=0,
        rtt_ns=0,
        phase="prefill",
        requested=1,
        prompt_target=500,
        counted=498,
        counted_source="tokenize",
    )
    assert rec.prompt_tokens == 498 and rec.prompt_tokens_source == "tokenize"


def test_final_usage_only_assumes_one_token_first_and_says_so():
    res = _res()
    res.chunk_n, res.output_tokens_source = None, "final_usage"
    rec = make_record(res, t_origin=0, rtt_ns=0, phase="decode", requested=10)
    assert rec.decode_tps == pytest.approx(100.0) and "n_first assumed 1" in rec.flags


def test_formatting():
    assert fmt_rate(29.74) == "29.7" and fmt_rate(604.4) == "604" and fmt_rate(3957.2) == "3,957"
    assert fmt_range(47.8, 50.7) == "47.8\u201350.7" and fmt_range(604.1, 604.3) == "604"
    assert fmt_range(95.0, 120.0) == "95.0\u2013120.0"


def test_lab_note_shape():
    s = RunSummary(
        measures={
            "decode_c1": 29.7,
            "decode_c1_cold": 20.0,
            "decode_c2_agg": 45.6,
            "decode_c2_overlap": 0.97,
            "prefill_4096": 750.2,
            "prefill_12600": 3957.0,
            "accept_per_draft": 4.79,
            "accept_length": 5.61,
            "accept_k": 5.0,
            "accept_rate": 0.958,
        },
        samples={"decode_c1": [29.0, 29.7, 30.1], "decode_c2_agg": [45.6]},
        ranges={"decode_c1": [29.0, 30.1]},
        n_ok=12,
        n_failed=1,
    )
    table = dict((r[0], r[1]) for r in rows(s))
    assert table["decode c1"] == "29.7 t/s (20.0 on the first, cold turn)"
    assert table["decode c2 (aggregate)"] == "45.6 t/s"
    assert table["prefill (4,096 prompt)"] == "750 t/s"
    assert table["prefill (12,600 prompt)"] == "3,957 t/s"
    assert table["acceptance"] == "4.79 of 5"
    text = render(s)
    assert "τ 5.61 tokens per engine step (engine counters, incl. bonus)" in text
    assert "α 95.8%" in text and "12 ok, 1 failed" in text


def _drained(head: int, n: int = 40, every_ms: int = 10) -> StreamResult:
    """A stream whose first `head` chunks reached a late reader together (25 us apart), then one every 10 ms."""
    t = [500 * MS + i * 25_000 for i in range(head)]
    t += [t[-1] + i * every_ms * MS for i in range(1, n - head + 1)]
    return StreamResult(
        t_send=0,
        t_hdr=MS,
        t_chunk1=t[0],
        t_first=t[0],
        t_content=t[0],
        t_last=t[-1],
        t_end=t[-1] + MS,
        chunk_t=t,
        chunk_n=[1] * n,
        output_tokens=n,
        output_tokens_source="continuous_usage",
        prompt_tokens=20,
        cached_tokens=0,
        finish_reason="length",
        http_status=200,
    )


def test_chunks_drained_with_the_first_read_do_not_inflate_decode():
    # 20 tokens waited in the buffer behind the first; the rest came at 100 t/s. Counting the drained 19 as
    # decode tokens would read (40-1)/0.2 s = 195 t/s.
    rec = make_record(_drained(20), t_origin=0, rtt_ns=0, phase="decode", requested=40)
    assert rec.decode_tps == pytest.approx(100.0) and rec.n_first == 20 and not rec.flags


def test_a_stream_read_in_one_burst_has_no_decode_rate_and_is_flagged():
    rec = make_record(_drained(40), t_origin=0, rtt_ns=0, phase="decode", requested=40)
    assert rec.ok and rec.decode_tps is None and "burst-read" in rec.flags


def test_mostly_burst_read_decode_is_flagged():
    res = _res(n=40)
    res.chunk_t = res.chunk_t[:5] + [res.chunk_t[4] + (i + 1) * 30_000 for i in range(35)]
    res.t_last = res.chunk_t[-1]
    rec = make_record(res, t_origin=0, rtt_ns=0, phase="decode", requested=40)
    assert "burst-read (36 of 39 decode tokens" in rec.flags


def _group(recs, k=2):
    from labkit.measure.request.recording import make_group

    return make_group(recs, k, 0, run_id="r", rep=0)


def _final_usage_only(res: StreamResult) -> StreamResult:
    res.chunk_n, res.output_tokens_source = None, "final_usage"
    return res


def test_group_without_per_chunk_counts_survives_a_zero_span_and_counts_burst_streams():
    a = make_record(
        _final_usage_only(_drained(40)), t_origin=0, rtt_ns=0, phase="decode", requested=40, concurrency=2
    )
    b = make_record(
        _final_usage_only(_drained(40)), t_origin=0, rtt_ns=0, phase="decode", requested=40, concurrency=2
    )
    b.t_first, b.t_last = a.t_first, a.t_first  # both streams stamped inside one instant
    a.t_last = a.t_first
    g = _group([a, b])  # divided by zero before
    assert g.ok and g.span_tps is None and g.burst_streams == 2 and "burst-read" in g.note


def test_summary_names_why_a_group_has_no_aggregate():
    s = RunSummary(measures={"decode_c2_span": 90.0, "decode_c2_overlap": 0.99})
    text = render(s)
    assert "serialised" not in text and "no aggregate" in text
    s = RunSummary(measures={"decode_c2_span": 90.0, "decode_c2_overlap": -0.2})
    assert "serialised (no overlap)" in render(s)


def test_group_window_opens_after_each_streams_first_arrival():
    # A: one token every 10 ms from 50 ms. B: its first 6 tokens reached a late reader together (20 us apart at
    # 55 ms), then one every 10 ms. Both decode at 100 t/s: the pair at 200 t/s (B's queued chunks read 210).
    def stream(t):
        n = len(t)
        return StreamResult(
            t_send=0,
            t_hdr=MS,
            t_chunk1=t[0],
            t_first=t[0],
            t_content=t[0],
            t_last=t[-1],
            t_end=t[-1] + MS,
            chunk_t=t,
            chunk_n=[1] * n,
            output_tokens=n,
            output_tokens_source="continuous_usage",
            prompt_tokens=20,
            cached_tokens=0,
            finish_reason="length",
            http_status=200,
        )

    a = [50 * MS + i * 10 * MS for i in range(60)]
    b = [55 * MS + i * 20_000 for i in range(6)] + [55 * MS + 100_000 + i * 10 * MS for i in range(1, 55)]
    recs = [
        make_record(stream(t), t_origin=0, rtt_ns=0, phase="decode", requested=len(t), concurrency=2)
        for t in (a, b)
    ]
    assert recs[1].n_first == 6 and recs[1].decode_tps == pytest.approx(100.0, rel=0.01)
    g = _group(recs)
    assert g.agg_tps == pytest.approx(200.0, rel=0.01)


def test_a_burst_read_turn_keeps_its_ttft_sample():
    from labkit.measure import default_plan
    from labkit.measure.summary.compose import summarize

    good = make_record(_res(n=40), t_origin=0, rtt_ns=0, phase="decode", requested=40)
    burst = _res(n=40)
    burst.chunk_t = burst.chunk_t[:1] + [burst.chunk_t[0] + 5 * MS + i * 30_000 for i in range(39)]
    burst.t_last = burst.chunk_t[-1]
    burst = make_record(burst, t_origin=0, rtt_ns=0, phase="decode", requested=40)
    assert "burst-read" in burst.flags
    s = summarize([good, burst], [], default_plan(), rtt_ns=0, counter_kind="tokenize", io={})
    assert s.samples["decode_c1"] == [good.decode_tps] and len(s.samples["ttft_c1"]) == 2
