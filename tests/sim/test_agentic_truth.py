"""Agentic sessions and idle turns in the simulator (docs/measurement.md, "Agentic sessions", "Idle turns"): the
sim's prefix cache holds the blocks of every prompt it prefilled, so each session turn's true hits are the
previous prompt in whole blocks and its TTFT is the new tokens over prefill_tps; its idle knob makes the first
request after a pause prefill and decode a known factor slower. run_bench recovers each truth from what it sees.
"""

from __future__ import annotations

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from labkit.recipe.sessionplan import AgenticPlan
from labkit.sim.config import SimConfigError, build_config
from labkit.sim.oracle import SimOracle

pytestmark = pytest.mark.alone  # timing truths within a few percent (tests/support/workers.py)

PORTS = (18940, 18959)  # this file's sim ports, clear of the other tests' ranges
PREFILL_TPS, DECODE_TPS, BLOCK = 2000.0, 200.0, 16
IDLE_AFTER, FACTOR = 1.0, 1.6
SETS = {
    "prefill_tps": PREFILL_TPS,
    "decode_tps": DECODE_TPS,
    "block_size": BLOCK,
    "cold_requests": 0,
    "idle_after_s": IDLE_AFTER,
    "idle_factor": FACTOR,
}
TURNS, TOOL, ANSWER = 4, 300, 24


def _plan(sessions=1, idle=(), turns=TURNS, prefill=()):
    return MeasurePlan(
        "chat",
        1,
        DecodePlan((1,), 3, 64, 1),
        PrefillPlan(prefill, 1),
        30.0,
        workloads={"agentic": AgenticPlan(turns, TOOL, ANSWER, sessions), "idle_s": tuple(idle)},
    )


@pytest.fixture(scope="module")
def one_session():
    with SimOracle(sets=SETS, ports=PORTS) as sim:
        res = run_bench(
            sim.url, _plan(idle=(2,), prefill=(512,)), BenchOptions(progress=False, prompt_seed="26")
        )
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    return res, truth


def test_each_turn_recovers_the_true_hits_ttft_and_prefill(one_session):
    res, truth = one_session
    turns = [r for r in res.records if r.phase == "agentic"]
    assert [r.turn for r in turns] == list(range(1, TURNS + 1)) and {r.session for r in turns} == {0}
    m = res.summary.measures
    prev = None
    for r in turns:
        assert r.ok, r.error
        t = truth[r.response_id]
        assert r.prompt_tokens == t["prompt_tokens"]
        # the engine's own hits (usage and the window's counters) are the truth, and the expected is exactly it
        assert r.hit_engine == r.hit_window == t["cached_tokens"]
        if prev is None:
            assert r.hit_expected is None and t["cached_tokens"] == 0  # a fresh nonce opens the session
        else:
            assert t["cached_tokens"] == prev.prompt_tokens // BLOCK * BLOCK > 0
            assert r.hit_expected == t["cached_tokens"] and r.hit_expected_max >= r.hit_expected
            # the conversation grew by the answer and a tool result of about TOOL server tokens
            grown = r.prompt_tokens - prev.prompt_tokens - ANSWER
            assert TOOL * 0.95 <= grown <= TOOL * 1.05 + 12, grown
        new = t["prompt_tokens"] - t["cached_tokens"]
        assert m[f"agentic_new_tokens_t{r.turn}"] == new
        assert m[f"agentic_hit_t{r.turn}"] == t["cached_tokens"]
        assert m[f"agentic_ttft_t{r.turn}"] == pytest.approx(new / PREFILL_TPS, rel=0.1, abs=0.004)
        assert m[f"agentic_prefill_t{r.turn}"] == pytest.approx(t["true_prefill_tps"], rel=0.1)
        assert m[f"agentic_decode_t{r.turn}"] == pytest.approx(DECODE_TPS, rel=0.03)
        prev = r
    assert m["agentic_hit_agreement"] == 1.0
    # TTFT by turn follows the new tokens, not the depth: turn 4 carries the most context but no more new tokens
    assert m[f"agentic_prompt_tokens_t{TURNS}"] > 3 * m["agentic_prompt_tokens_t2"] / 2
    assert m[f"agentic_ttft_t{TURNS}"] < 1.3 * m["agentic_ttft_t2"]


def test_the_fresh_prompt_figures_stay_free_of_cache_hits(one_session):
    res, truth = one_session
    for r in res.records:
        if r.phase in ("decode", "warmup", "prefill", "idle"):
            assert truth[r.response_id]["cached_tokens"] == 0, r.phase
    ev = res.summary.evidence
    assert ev["agentic"]["prefix_cache_hits"] > 0 and ev["prefill_512"].get("prefix_cache_hits", 0) == 0
    assert {f["code"] for f in res.summary.flags} == set()  # the sessions' hits raise no flag
    assert res.summary.measures["prefix_cache_hit_ratio"] == 0


def test_the_idle_turn_recovers_the_idle_penalty(one_session):
    res, truth = one_session
    idle = [r for r in res.records if r.phase == "idle"]
    assert len(idle) == 1 and idle[0].idle_s == 2 and not idle[0].cold
    t = truth[idle[0].response_id]
    assert t["idle"] and not any(truth[r.response_id]["idle"] for r in res.records if r.phase != "idle")
    m = res.summary.measures
    assert m["idle_2_slowdown"] == pytest.approx(FACTOR, rel=0.03)
    assert m["idle_2_decode"] == pytest.approx(DECODE_TPS / FACTOR, rel=0.03)
    assert "idle_2" in res.summary.evidence and res.summary.evidence["idle_2"]["sent"] == 1


def test_two_sessions_at_once_share_turn_windows_and_nothing_else():
    with SimOracle(sets=SETS, ports=PORTS) as sim:
        res = run_bench(sim.url, _plan(sessions=2, turns=3), BenchOptions(progress=False, prompt_seed="7"))
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    turns = [r for r in res.records if r.phase == "agentic"]
    assert sorted((r.turn, r.session) for r in turns) == [(t, s) for t in (1, 2, 3) for s in (0, 1)]
    for turn in (2, 3):
        pair = [r for r in turns if r.turn == turn]
        assert pair[0].hit_window == sum(truth[r.response_id]["cached_tokens"] for r in pair)
        for r in pair:  # each session hits only its own previous prompt
            assert r.hit_engine == r.hit_expected == truth[r.response_id]["cached_tokens"]
            assert r.concurrency == 2
    assert res.summary.measures["agentic_hit_agreement"] == 1.0


def test_the_idle_knob_is_checked():
    with pytest.raises(SimConfigError, match="idle_factor"):
        build_config(sets=["idle_factor=0.5"])
