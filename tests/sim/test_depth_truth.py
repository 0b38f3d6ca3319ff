"""Context depth in the simulator (docs/measurement.md, "Context depth"): the sim's prefix cache holds the
blocks of every prompt it prefilled, so a cached request's true hits are its load request's prompt in whole
blocks and its TTFT is the new tokens over prefill_tps; an uncached one prefills everything; its decode slows
by the known factor 1 + decode_ctx_slope * P / 1000. run_bench recovers each truth from what it sees.
"""

from __future__ import annotations

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.recipe import DecodePlan, DepthPlan, MeasurePlan, PrefillPlan
from labkit.sim.oracle import SimOracle

pytestmark = pytest.mark.alone  # timing truths within a few percent (tests/support/workers.py)

PORTS = (18960, 18979)  # this file's sim ports, clear of the other tests' ranges
PREFILL_TPS, DECODE_TPS, BLOCK, SLOPE = 20_000.0, 200.0, 16, 0.25
SETS = {
    "prefill_tps": PREFILL_TPS,
    "decode_tps": DECODE_TPS,
    "block_size": BLOCK,
    "cold_requests": 0,
    "decode_ctx_slope": SLOPE,
}
DEPTHS, QUESTION, ANSWER = (0, 1000, 3000), 96, 32


def _plan(api: str = "chat", cache: tuple[str, ...] = ("uncached", "cached")) -> MeasurePlan:
    return MeasurePlan(
        api,
        1,
        DecodePlan((1,), 2, 32, 1),
        PrefillPlan((), 1),
        30.0,
        workloads={"depth": DepthPlan(DEPTHS, cache, QUESTION, ANSWER)},
    )


@pytest.fixture(scope="module", params=["chat", "completions"])
def measured(request):
    with SimOracle(sets=SETS, ports=PORTS) as sim:
        res = run_bench(sim.url, _plan(request.param), BenchOptions(progress=False, prompt_seed="26"))
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    return res, truth


def test_each_depth_recovers_the_true_hits_ttft_and_decode(measured):
    res, truth = measured
    depth = [r for r in res.records if r.phase == "depth"]
    states = [(r.depth, r.cache_state) for r in depth]
    assert states == [(0, "uncached"), (1000, "uncached"), (1000, "load"), (1000, "cached")] + [
        (3000, "uncached"),
        (3000, "load"),
        (3000, "cached"),
    ]
    m = res.summary.measures
    loads = {r.depth: r for r in depth if r.cache_state == "load"}
    for r in depth:
        assert r.ok, r.error
        t = truth[r.response_id]
        if r.cache_state == "load":
            assert r.prompt_tokens == r.depth  # the context, fitted to the token by the sim's /tokenize
            continue
        assert r.hit_engine == r.hit_window == t["cached_tokens"]
        key = "" if r.cache_state == "uncached" else "_cached"
        if r.cache_state == "uncached":
            assert t["cached_tokens"] == 0  # a fresh nonce opens every context
            assert r.hit_expected is None
        else:
            assert t["cached_tokens"] == loads[r.depth].prompt_tokens // BLOCK * BLOCK > 0
            assert r.hit_expected == t["cached_tokens"]
        new = t["prompt_tokens"] - t["cached_tokens"]
        assert m[f"depth_{r.depth}_new_tokens{key}"] == new
        # never shorter than the simulated prefill of the new tokens; what the client adds on top grows with
        # the prompt and with how fast the machine is, so the cached figure is checked against the uncached
        # one of the same depth below, where it cancels
        assert m[f"depth_{r.depth}_ttft{key}"] > 0.9 * new / PREFILL_TPS
        if r.cache_state == "cached":
            saved = t["cached_tokens"] / PREFILL_TPS  # the prefill the cache hit spared
            gap = m[f"depth_{r.depth}_ttft"] - m[f"depth_{r.depth}_ttft_cached"]
            assert gap == pytest.approx(saved, rel=0.15, abs=0.004)
        want = DECODE_TPS / (1 + SLOPE * t["prompt_tokens"] / 1000)
        assert m[f"depth_{r.depth}_decode{key}"] == pytest.approx(want, rel=0.03)
        # the question is about QUESTION server tokens past the context (and its acknowledgement)
        assert QUESTION * 0.9 <= t["prompt_tokens"] - r.depth <= QUESTION * 1.1 + 16
    assert m["depth_hit_agreement"] == 1.0
    assert m["depth_3000_ttft_gain"] > 5  # 3,000 tokens of context computed against a question's
    assert "depth_0_ttft_cached" not in m  # depth 0 has no context to cache


def test_the_depth_windows_keep_their_hits_to_themselves(measured):
    res, truth = measured
    for r in res.records:
        if r.phase in ("decode", "warmup"):
            assert truth[r.response_id]["cached_tokens"] == 0, r.phase
    ev = res.summary.evidence
    assert ev["depth_1000"]["prefix_cache_hits"] > 0 and ev["depth_1000"]["sent"] == 3
    assert ev["depth_0"]["sent"] == 1
    assert {f["code"] for f in res.summary.flags} == set()


def test_a_plan_of_uncached_contexts_sends_no_load():
    with SimOracle(sets=SETS, ports=PORTS) as sim:
        res = run_bench(sim.url, _plan(cache=("uncached",)), BenchOptions(progress=False))
    depth = [r for r in res.records if r.phase == "depth"]
    assert [r.cache_state for r in depth] == ["uncached"] * len(DEPTHS)
    assert not any(k.endswith("_cached") for k in res.summary.measures)
