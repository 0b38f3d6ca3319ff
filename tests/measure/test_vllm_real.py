"""labkit's measurement against a real vLLM (the CPU build) serving labkit's tiny llama with ngram speculation
(K = 4): K from the engine, τ per engine step, a deliberate prefix-cache hit, /tokenize-sized prompts, bursts,
and the engine's own per-request figures (--enable-per-request-metrics, --per-request-spec-decode-metrics).

The engine is the session's shared tiny-vllm lane (ngram, the recipe's per-request switches;
tests/support/vllm_fixtures.py): a CPU boot takes ~50 s on 2 cores. Every expected figure is a delta of the
server's own /metrics around this file's requests, worked out with a parser of this file, not labkit's, and
no test expects a cold engine. No assertion is about speed. Facts: docs/measurement.md, "Speculative
acceptance conventions".
"""

from __future__ import annotations

import dataclasses
import json
import re
import urllib.request

import pytest

from labkit.measure import BenchOptions, render, run_bench
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from tests.support.vllm import vllm_available

pytestmark = pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")

NGRAM = '{"method":"ngram","num_speculative_tokens":4,"prompt_lookup_max":4,"prompt_lookup_min":2}'
# the switches the vLLM lanes turn on (docs/engines.md, "Per-request metrics in the response")
TRUTH = ("--enable-per-request-metrics", "--per-request-spec-decode-metrics", "summary")


def test_the_shared_lane_runs_the_flags_this_file_is_about(vllm_shared):
    """The figures below hold for ngram with K = 4 and the per-request switches: the shared lane must have them."""
    argv = next(launch.argv for launch in vllm_shared.lane.launches())
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert json.loads(NGRAM) == spec
    assert TRUTH[0] in argv and argv[argv.index(TRUTH[1]) + 1] == TRUTH[2]


@pytest.fixture
def url(vllm_lane):
    """The shared lane's root URL, idle and with an empty prefix cache."""
    return vllm_lane.url


def plan(*, decode=(), prompts=(), turns=3, n=128, warmup=1, repeats=1, api="chat") -> MeasurePlan:
    return MeasurePlan(
        api=api,
        runs=1,
        decode=DecodePlan(concurrency=tuple(decode) or (1,), turns=turns, output_tokens=n, warmup=warmup),
        prefill=PrefillPlan(prompt_tokens=tuple(prompts), repeats=repeats),
        timeout=120.0,
    )


def counters(url: str) -> dict[str, float]:
    """Every sample of /metrics summed over its labels, by metric name (this test's own parser)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    out: dict[str, float] = {}
    for m in re.finditer(r"^([a-z_:]+)(?:\{[^}]*\})? ([0-9.e+-]+)$", text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


@pytest.fixture(scope="module")
def decode_run(vllm_shared):
    """One decode window (warmup, 3 c1 turns, 3 c2 groups), with the server's counters around it."""
    vllm_shared.prepare()
    url = vllm_shared.url
    before = counters(url)
    # the tiny random model loops by nature (its recipes say model.loops): loops reported, not gating
    options = BenchOptions(progress=False, cold_expected=False, prefill=False, loops_expected=True)
    res = run_bench(url, plan(decode=(1, 2), turns=3), options)
    after = counters(url)
    return res, {k: after[k] - before.get(k, 0.0) for k in after}


def test_acceptance_is_x_of_4_with_k_from_the_engine(decode_run):
    res, _ = decode_run
    m, method = res.summary.measures, res.summary.method
    assert m["accept_k"] == 4 and "4 per-position series" in method["accept_k"]
    text = render(res.summary)
    assert re.search(r"\d\.\d\d of 4\b", text), text
    assert m["accept_proposed_per_draft"] <= 4 and 0 < m["accept_drafted_share"] <= 1


def test_tau_is_tokens_per_engine_step_as_the_stream_shows_it(decode_run):
    res, d = decode_run
    m = res.summary.measures
    steps = d["vllm:time_to_first_token_seconds_count"] + d["vllm:inter_token_latency_seconds_count"]
    assert m["accept_length"] == pytest.approx(d["vllm:generation_tokens_total"] / steps)
    window = [r for r in res.records if r.phase in ("warmup", "decode")]
    assert sum(r.output_tokens for r in window) == d["vllm:generation_tokens_total"]
    # one SSE chunk per engine step per request (a merge could only make chunks fewer)
    chunks = sum(r.chunks for r in window)
    assert chunks <= steps and m["accept_length_stream"] == pytest.approx(
        sum(r.output_tokens for r in window) / chunks
    )
    # every request-step yields 1 + its accepted drafts, so τ can never reach 1 + ā while some steps draft nothing
    assert m["accept_length"] <= 1 + m["accept_per_draft"]


def test_every_turn_carries_the_engines_own_ttft_and_bursts_blame_no_side(decode_run):
    res, _ = decode_run
    decode = [r for r in res.records if r.phase in ("warmup", "decode")]
    assert all(r.server_ttft_s is not None and r.server_window["generation_tokens"] > 0 for r in decode)
    assert {r.server_window["requests"] for r in decode if r.concurrency == 1} == {1}
    assert {r.server_window["requests"] for r in decode if r.concurrency == 2} == {2}
    assert "ttft_c1_server" in res.summary.measures
    for r in decode:
        if "burst-read" in r.flags:
            assert "cannot tell whether the server or the client held them" in r.flags
    assert not any("fell behind" in n for n in res.summary.notes)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_prompts_sized_with_tokenize_are_exact(url, api):
    res = run_bench(
        url, plan(prompts=(512, 2048), warmup=0, api=api), BenchOptions(progress=False, decode=False)
    )
    assert res.provenance["prompt_length_counter"] == "server /tokenize"
    pre = [r for r in res.records if r.phase == "prefill"]
    assert len(pre) == 2 and all(r.ok and r.prompt_tokens_source == "usage" for r in pre)
    assert [(r.prompt_target, r.prompt_tokens) for r in pre] == [(512, 512), (2048, 2048)]
    assert not any("prefix-cache-hit" in r.flags for r in pre)  # fresh nonces: nothing shared


def test_a_prompt_repeated_on_purpose_is_a_prefix_cache_hit(url, monkeypatch):
    from labkit.measure.prompt import prompts as pr

    same = pr.nonce()
    monkeypatch.setattr(pr, "nonce", lambda: same)  # every prefill prompt identical
    res = run_bench(
        url, plan(prompts=(1024,), warmup=1, repeats=1), BenchOptions(progress=False, decode=False)
    )
    first, second = [r for r in res.records if r.prompt_target == 1024]
    assert first.phase == "warmup" and "prefix-cache-hit" not in first.flags
    assert second.phase == "prefill" and "prefix-cache-hit" in second.flags
    assert res.summary.measures["prefix_cache_hit_ratio"] > 0.5 and "prefill_1024" not in res.summary.measures


def test_the_lab_path_takes_k_from_the_recipe(url):
    from labkit.measure import configured_k

    @dataclasses.dataclass
    class Engine:
        args: dict

        def arg(self, flag):
            return self.args.get(flag)

    k, source = configured_k(Engine({"--speculative-config": (NGRAM,)}))
    res = run_bench(
        url,
        plan(turns=2, warmup=0),
        BenchOptions(progress=False, cold_expected=False, prefill=False, spec_k=k, spec_k_source=source),
    )
    assert res.summary.measures["accept_k"] == 4
    assert res.summary.method["accept_k"] == "K: recipe --speculative-config num_speculative_tokens"


def test_the_engines_own_per_request_figures_are_parsed_and_stored(decode_run):
    import csv
    import io
    import json

    from labkit.store.records import requests_csv

    res, d = decode_run
    window = [r for r in res.records if r.phase in ("warmup", "decode")]
    assert window and all(r.engine_metrics for r in window)
    for r in window:
        m = r.engine_metrics
        assert {"time_to_first_token_ms", "generation_time_ms", "queue_time_ms", "mean_itl_ms"} <= set(m)
        assert r.engine_ttft_s == pytest.approx((m["queue_time_ms"] + m["time_to_first_token_ms"]) / 1000)
        assert r.engine_decode_tps == pytest.approx((r.output_tokens - 1) / (m["generation_time_ms"] / 1000))
        assert r.ttft_minus_engine_s == pytest.approx(r.ttft_s - r.engine_ttft_s)
        sd = m["speculative_decoding"]
        assert sd["num_spec_tokens"] == 4 and len(sd["acceptance_histogram"]) == 5
        assert sum(j * n for j, n in enumerate(sd["acceptance_histogram"])) == sd["num_accepted_draft_tokens"]
        assert sum(sd["acceptance_histogram"]) == sd["num_spec_steps"]
    # the requests' own counts are the counters' verify steps, request by request: they sum to the window's deltas
    spec = [r.engine_metrics["speculative_decoding"] for r in window]
    assert (
        sum(x["num_accepted_draft_tokens"] for x in spec) == d["vllm:spec_decode_num_accepted_tokens_total"]
    )
    assert sum(x["num_spec_steps"] for x in spec) == d["vllm:spec_decode_num_drafts_total"]
    m = res.summary.measures
    assert {"decode_c1_engine_gap", "decode_c1_ttft_engine_gap", "decode_c2_accept_per_draft"} <= set(m)
    assert "server truth" in render(res.summary)
    # stored beside labkit's own figures: requests.csv keeps the object as JSON and every derived column
    text, _ = requests_csv(res.records)
    rows = list(csv.DictReader(io.StringIO(text)))
    first = next(row for row in rows if row["phase"] == "decode")
    assert json.loads(first["engine_metrics"])["speculative_decoding"]["num_spec_tokens"] == 4
    assert float(first["engine_decode_tps"]) > 0 and first["ttft_minus_engine_s"] != ""
    print(render(res.summary))  # what the agreement looks like on this machine (-s shows it)
