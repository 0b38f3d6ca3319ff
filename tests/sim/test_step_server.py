"""The simulator's step mode through its real HTTP server: concurrent streams read what /sim/requests says was
sent and when, a long prompt stretches the gaps of the streams decoding beside it as the step formula says, the
KV pool preempts and counts it in vllm:num_preemptions_total, and the gauges are exact at a scrape.

Timing checks compare the client with the sim's own recorded truth (its emission targets and send times, on the
same CLOCK_MONOTONIC) or with the formula's step times, with bounds that tell one step composition from another
on a loaded 2-core machine; none assumes how fast the machine is.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time

import pytest

from tests.support.sim import SimProc, chat, get_json, metric_sum, metrics, stream

pytestmark = pytest.mark.alone  # client-side gaps against the truth (tests/support/workers.py)

BASE, TOK = 0.01, 0.0001  # step_base_s, step_token_s: a step of n tokens lasts 10 + 0.1 n ms
CONT = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}


@pytest.fixture
def sim():
    """Factory: sim(*args) starts a step-mode server (preset test, record_chunks); all stopped at teardown."""
    procs: list[SimProc] = []

    def start(*args: str) -> SimProc:
        steps = ["--set", "record_chunks=true", f"step_base_s={BASE}", f"step_token_s={TOK}"]
        p = SimProc(["--preset", "test", *steps, *args])
        procs.append(p)
        p.wait_up()
        return p

    yield start
    for p in procs:
        p.stop()


def _parallel(port: int, bodies: list[dict], delays: list[float] | None = None) -> list:
    """Stream every body on its own connection at once (or after its delay); the streams in body order."""
    out: list = [None] * len(bodies)

    def go(i: int) -> None:
        if delays:
            time.sleep(delays[i])
        out[i] = stream(port, "/v1/chat/completions", bodies[i], timeout=60)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _truths(port: int) -> dict[int, dict]:
    """The records by the number of output tokens asked (each test asks distinct ones)."""
    return {r["max_tokens"]: r for r in get_json(port, "/sim/requests")["requests"]}


def test_concurrent_streams_read_the_truths_ttft_and_gaps(sim):
    p = sim("--max-num-batched-tokens", "256")
    sizes = [40, 41, 42, 43, 44, 45]
    streams = _parallel(p.port, [chat(f"stream {n} " + "w " * n, n, **CONT) for n in sizes])
    truths = _truths(p.port)
    lags = []
    for n, s in zip(sizes, streams, strict=True):
        t = truths[n]
        assert (
            s.done
            and t["status"] == "finished"
            and t["completion_tokens"] == n == s.usage["completion_tokens"]
        )
        sent = [actual for _, actual, _ in t["emissions"]]
        got = [at for at, _ in s.token_events]
        assert len(got) == len(sent) == n  # one SSE event per step's token
        # TTFT: the client's is the server's (arrival to first token sent) plus the trip both ways
        server_ttft = t["t_first"] - t["t_arrival"]
        client_ttft = got[0] - s.t0
        assert 0 <= client_ttft - server_ttft < 0.25
        assert t["t_scheduled"] >= t["t_arrival"] and t["t_first_target"] >= t["t_scheduled"]
        # every event reaches the client after the sim sent it, and the gaps follow the sent ones
        lag = [g - a for g, a in zip(got, sent, strict=True)]
        assert min(lag) > -0.001
        lags += lag
        client_gaps = [b - a for a, b in zip(got, got[1:], strict=False)]
        truth_gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
        assert statistics.median(client_gaps) == pytest.approx(statistics.median(truth_gaps), abs=0.003)
        # the targets are steps of the formula: BASE + TOK x k for a whole number k of tokens within the budget
        targets = [target for target, _, _ in t["emissions"]]
        ks = [(b - a - BASE) / TOK for a, b in zip(targets, targets[1:], strict=False)]
        assert all(abs(k - round(k)) < 1e-3 and 1 <= round(k) <= 256 for k in ks)
    assert statistics.median(lags) < 0.01


def test_a_long_prompt_stretches_the_streams_gaps_as_the_step_formula_says(sim):
    budget, P = 512, 2006  # chat("w0 ... w1999") is 2006 prompt tokens
    p = sim("--max-num-batched-tokens", str(budget))
    long = chat(" ".join(f"w{i}" for i in range(2000)), 3, **CONT)
    bodies = [chat("a", 150, **CONT), chat("b", 151, **CONT), long]
    streams = _parallel(p.port, bodies, delays=[0, 0, 0.4])
    truths = _truths(p.port)
    t_long = truths[3]
    assert t_long["prompt_tokens"] == P and t_long["prefill_chunks"] == -(-P // (budget - 2))
    start, end = t_long["t_scheduled"], t_long["t_first_target"]
    full = BASE + TOK * budget
    for n, s in zip((150, 151), streams[:2], strict=False):
        em = truths[n]["emissions"]
        during = [(b[0] - a[0], b[1]) for a, b in zip(em, em[1:], strict=False) if start < b[0] <= end + 1e-9]
        assert len(during) == t_long["prefill_chunks"]
        # the truth: every step of the prefill but its last is a full budget of tokens
        assert [g for g, _ in during[:-1]] == pytest.approx([full] * (len(during) - 1))
        assert during[-1][0] == pytest.approx(BASE + TOK * (2 + P - (len(during) - 1) * (budget - 2)))
        # the client sees the same: gaps near a full step inside the prefill, near a two-decode step outside
        got = [at for at, _ in s.token_events]
        sent = [actual for _, actual, _ in em]
        inside = [got[i + 1] - got[i] for i in range(len(got) - 1) if start < em[i + 1][0] <= end - 1e-6]
        outside = [got[i + 1] - got[i] for i in range(len(got) - 1) if em[i + 1][0] > end + 0.05]
        assert statistics.median(inside) == pytest.approx(full, abs=0.01)
        assert statistics.median(outside) == pytest.approx(BASE + 2 * TOK, abs=0.004)
        assert len(sent) == n
    # the long request's TTFT is the steps it waited for plus its own prefill steps
    assert end - start == pytest.approx(
        (t_long["prefill_chunks"] - 1) * full
        + BASE
        + TOK * (2 + P - (t_long["prefill_chunks"] - 1) * (budget - 2))
    )


def test_a_small_kv_pool_preempts_and_counts_it(sim):
    """Four requests of 8 prompt tokens and 150 output tokens need ceil(157 / 16) = 10 blocks each at the end:
    24 blocks hold two, so the pool preempts, and every stream still gets all its tokens in order."""
    p = sim("--max-num-batched-tokens", "1024", "--set", "kv_gpu_blocks=24", "max_model_len=384")
    sizes = [150, 151, 152, 153]
    streams = _parallel(p.port, [chat(f"p{n}", n, **CONT) for n in sizes])
    truths = _truths(p.port)
    for n, s in zip(sizes, streams, strict=True):
        counts = [e["usage"]["completion_tokens"] for _, e in s.token_events]
        assert s.done and counts == list(range(1, n + 1)) and truths[n]["completion_tokens"] == n
    m = metrics(p.port)
    preempted = sum(t["preemptions"] for t in truths.values())
    assert preempted > 0 and metric_sum(m, "vllm:num_preemptions_total") == preempted
    # a preempted request recomputed its prompt and its tokens: more than one prefill chunk
    assert all(t["prefill_chunks"] > 1 for t in truths.values() if t["preemptions"])
    assert metric_sum(m, "vllm:kv_cache_usage_perc") == 0.0
    assert metric_sum(m, "vllm:num_requests_running") == 0 == metric_sum(m, "vllm:num_requests_waiting")


def test_gauges_at_a_scrape_with_max_num_seqs(sim):
    p = sim("--max-num-batched-tokens", "512", "--max-num-seqs", "1")
    out: list = []
    threads = [
        threading.Thread(target=lambda n=n: out.append(stream(p.port, "/v1/chat/completions", chat("g", n))))
        for n in (100, 101, 102)
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while len(get_json(p.port, "/sim/requests")["requests"]) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    m, truth = metrics(p.port), get_json(p.port, "/sim/requests")
    assert metric_sum(m, "vllm:num_requests_running") == 1 and metric_sum(m, "vllm:num_requests_waiting") == 2
    assert (truth["running"], truth["waiting"]) == (1, 2)
    assert 0 < metric_sum(m, "vllm:kv_cache_usage_perc") < 1
    for t in threads:
        t.join()
    recs = sorted(get_json(p.port, "/sim/requests")["requests"], key=lambda r: r["t_scheduled"])
    # one at a time: each is scheduled once the one before it has sent its last token
    for a, b in zip(recs, recs[1:], strict=False):
        assert b["t_scheduled"] >= a["t_last_target"] - 1e-9 and b["t_scheduled"] > b["t_arrival"]


def test_faults_and_a_client_leaving_free_the_step_slot(sim):
    faults = ["fault_stall_request=1", "fault_stall_after_tokens=4", "fault_http500_request=2"]
    p = sim("--max-num-batched-tokens", "512", "--max-num-seqs", "1", "--set", *faults)
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=0.6)
    with pytest.raises(TimeoutError):
        stream(p.port, "/v1/chat/completions", chat("stalls", 50, **CONT), conn=c)
    assert stream(p.port, "/v1/chat/completions", chat("500", 5)).status == 500
    # the stalled request left the scheduler: with one slot, the next one still runs
    assert stream(p.port, "/v1/chat/completions", chat("next", 5)).done
    c.close()
    leaving = http.client.HTTPConnection("127.0.0.1", p.port, timeout=5)
    stream(p.port, "/v1/chat/completions", chat("leaving", 500, **CONT), conn=leaving, max_events=4)
    leaving.close()
    assert stream(p.port, "/v1/chat/completions", chat("after", 5)).done
    recs = {r["index"]: r for r in get_json(p.port, "/sim/requests")["requests"]}
    assert recs[1]["status"] == "stalled" and recs[1]["completion_tokens"] == 4
    assert recs[4]["status"] == "aborted" and recs[4]["completion_tokens"] < 500
    m = metrics(p.port)
    assert metric_sum(m, "vllm:num_requests_running") == 0 == metric_sum(m, "vllm:kv_cache_usage_perc")


def test_a_client_leaving_the_queue_frees_its_place(sim):
    p = sim("--max-num-batched-tokens", "512", "--max-num-seqs", "1")
    first: list = []
    runner = threading.Thread(
        target=lambda: first.append(stream(p.port, "/v1/chat/completions", chat("a", 150)))
    )
    runner.start()
    deadline = time.monotonic() + 10
    while not get_json(p.port, "/sim/requests")["requests"] and time.monotonic() < deadline:
        time.sleep(
            0.01
        )  # "a" admitted first, so "b" is the one that waits (a loaded machine may start it late)
    queued = http.client.HTTPConnection("127.0.0.1", p.port, timeout=5)
    queued.request("POST", "/v1/chat/completions", body=json.dumps(dict(chat("b", 20), stream=True)))
    while len(get_json(p.port, "/sim/requests")["requests"]) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert metric_sum(metrics(p.port), "vllm:num_requests_waiting") == 1
    queued.close()  # gone before a step ran it
    while (
        get_json(p.port, "/sim/requests")["requests"][1]["status"] == "running"
        and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    left = get_json(p.port, "/sim/requests")["requests"][1]
    assert left["status"] == "aborted" and left["t_scheduled"] is None and left["completion_tokens"] == 0
    assert metric_sum(metrics(p.port), "vllm:num_requests_waiting") == 0
    runner.join()
    assert first[0].done


def test_spec_decoding_in_step_mode_counts_and_reports_as_the_truth_says(sim):
    """Two spec streams at once: chunks of 1 + accepted tokens, the vLLM counters and each response's
    per-request spec metrics equal to the records, and every decode step BASE + TOK x (1 + K) per stream."""
    spec = [
        "spec_method=mtp",
        "spec_k=3",
        "spec_accept=0.9,0.6,0.3",
        "per_request_spec_decode_metrics=detailed",
    ]
    p = sim("--max-num-batched-tokens", "512", "--set", *spec)
    sizes = [120, 121]
    streams = _parallel(p.port, [chat(f"spec {n}", n, **CONT) for n in sizes])
    truths = _truths(p.port)
    m = metrics(p.port)
    for n, s in zip(sizes, streams, strict=True):
        t = truths[n]
        counts = [e["usage"]["completion_tokens"] for _, e in s.token_events]
        steps = [b - a for a, b in zip([0, *counts], counts, strict=False)]
        assert s.done and counts[-1] == n and steps[0] == 1 and all(1 <= k <= 4 for k in steps)
        assert t["steps"] == t["drafts"] == len(steps) - 1 and t["draft_tokens"] == 3 * t["drafts"]
        sd = next(e["metrics"] for _, e in s.events if isinstance(e, dict) and "metrics" in e)
        sd = sd["speculative_decoding"]
        assert sd["num_spec_steps"] == t["drafts"] and sd["num_accepted_draft_tokens"] == t["accepted"]
        assert sum(sd["per_step_accepted"]) == t["accepted"] and sd["per_step_drafted"] == [3] * t["drafts"]
        assert [min(1 + a, k) for a, k in zip(sd["per_step_accepted"], steps[1:], strict=True)] == steps[1:]
    recs = list(truths.values())
    assert metric_sum(m, "vllm:spec_decode_num_drafts_total") == sum(r["drafts"] for r in recs)
    assert metric_sum(m, "vllm:spec_decode_num_draft_tokens_total") == 3 * sum(r["drafts"] for r in recs)
    assert metric_sum(m, "vllm:spec_decode_num_accepted_tokens_total") == sum(r["accepted"] for r in recs)
    # both streams' decode steps: BASE + TOK x (1 + K) per decode in the step, two at once while both run
    for t in recs:
        targets = [target for target, _, _ in t["emissions"]]
        ks = [(b - a - BASE) / TOK for a, b in zip(targets, targets[1:], strict=False)]
        assert all(abs(k - round(k)) < 1e-3 and 4 <= round(k) <= 512 for k in ks)
        assert statistics.median(round(k) for k in ks) == 8


def test_decode_noise_in_step_mode_sets_each_lone_requests_rate(sim):
    p = sim("--max-num-batched-tokens", "512", "--set", "decode_noise=0.2", "seed=4")
    for i in range(4):
        assert stream(p.port, "/v1/chat/completions", chat(f"noise {i}", 30 + i)).done
    recs = get_json(p.port, "/sim/requests")["requests"]
    assert len({r["rate_factor"] for r in recs}) == 4
    for r in recs:  # one at a time: each decode step lasts (BASE + TOK) / its factor
        assert r["scheduled_decode_tps"] == pytest.approx(r["rate_factor"] / (BASE + TOK), rel=1e-6)
