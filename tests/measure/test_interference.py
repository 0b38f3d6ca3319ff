"""Prefill under decode (docs/measurement.md, "Prefill under decode"): the stall and gap definitions on stamps
made by hand, then the workload against the simulator's step scheduler, whose truth is known: each prefill token
costs 1 / prefill_tps of step time, so an arrival of P tokens stalls N streams by N x P / prefill_tps whatever the
token budget, and the budget only spreads it (one long gap, or several shorter ones and a later first token)."""

from __future__ import annotations

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.measure.summary.interference import Prefill, effect, gaps
from labkit.recipe import DecodePlan, InterferencePlan, MeasurePlan, PrefillPlan
from labkit.sim.oracle import SimOracle

MS = 1_000_000  # ns


def test_gaps_leave_out_the_first_one():
    assert gaps([0, 50 * MS, 60 * MS, 70 * MS]) == [(50 * MS, 60 * MS), (60 * MS, 70 * MS)]
    assert gaps([0]) == [] and gaps([]) == []


def test_the_stall_is_the_overlapping_gaps_excess_over_the_median_before():
    # a stream stamping every 10 ms, then one 100 ms gap while a prompt prefills, then 10 ms again
    stamps = [i * 10 * MS for i in range(10)] + [190 * MS + i * 10 * MS for i in range(5)]
    prefill = Prefill(t_send=95 * MS, t_first=189 * MS)
    e = effect(prefill, [], [stamps, stamps])
    assert e.gap_before_s == pytest.approx(0.010)
    assert e.gap_max_s == pytest.approx(0.100) and e.gap_after_s == pytest.approx(0.010)  # back at its pace
    # both streams: their 100 ms gap is 90 ms over the median; the gap the prompt was sent in is not longer
    assert e.stall_s == pytest.approx(2 * 0.090) and e.covered
    # a stream that ended before the first token leaves the arrival uncovered
    assert not effect(prefill, [], [stamps, stamps[:9]]).covered


def test_a_gap_shorter_than_the_baseline_counts_zero_and_earlier_prefills_leave_the_baseline():
    stamps = [t * MS for t in (0, 10, 20, 70, 120, 130, 135, 140)]
    first = Prefill(25 * MS, 119 * MS)  # its two 50 ms gaps are no baseline for the next arrival
    e = effect(Prefill(131 * MS, 139 * MS), [first], [stamps])
    assert e.gap_before_s == pytest.approx(0.010)  # the 10 ms gaps, not the median 30 ms of all four
    assert effect(Prefill(131 * MS, 139 * MS), [], [stamps]).gap_before_s == pytest.approx(0.030)
    assert e.stall_s == 0.0  # the 5 ms gaps it overlaps are shorter than that


def _plan(p: InterferencePlan) -> MeasurePlan:
    return MeasurePlan(
        "chat", 1, DecodePlan((1,), 0, 16, 0), PrefillPlan((), 1), 30.0, seed=2, workloads={"interference": p}
    )


PROMPT = 2000
SIM = {"decode_tps": 200, "prefill_tps": 20000, "batch_beta": 0.5, "record_chunks": True}
PLAN = InterferencePlan((PROMPT,), streams=2, stream_tokens=320, warm_tokens=16, arrivals=2, spacing_s=0.6)


def _measure(budget: int):
    with SimOracle(sets={**SIM, "max_num_batched_tokens": budget}) as sim:
        res = run_bench(sim.url, _plan(PLAN), BenchOptions(progress=False))
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    return res, truth


@pytest.fixture(scope="module")
def by_budget():
    """The same plan with the whole prompt in one step (8192) and in chunks of about 500 tokens (512)."""
    return {budget: _measure(budget) for budget in (8192, 512)}


@pytest.mark.alone  # client stamps read against the engine's write times, in ms (tests/support/workers.py)
@pytest.mark.parametrize("budget", [8192, 512])
def test_the_stall_and_the_gaps_are_the_engines_own(by_budget, budget):
    res, truth = by_budget[budget]
    recs = [r for r in res.records if r.phase == "interference"]
    streams = [r for r in recs if r.interference == "stream"]
    arrivals = sorted((r for r in recs if r.interference == "arrival"), key=lambda r: r.t_send)
    assert len(streams) == 2 and len(arrivals) == 2 and all(r.ok for r in recs)
    assert all(r.arriving_tokens == PROMPT and r.output_tokens == 1 for r in arrivals)
    ns = lambda t: round(t * 1e9)  # noqa: E731 - the truth's perf_counter seconds as ns
    written = [[ns(actual) for _, actual, _ in truth[r.response_id]["emissions"]] for r in streams]
    done: list[Prefill] = []
    m = res.summary.measures
    stalls = []
    for a in arrivals:
        t = truth[a.response_id]
        p = Prefill(ns(t["t_arrival"]), ns(t["t_first"]))
        engine = effect(p, done, written)
        done.append(p)
        stalls.append(engine.stall_s)
        new = t["prompt_tokens"] - t["cached_tokens"]
        # the known truth: every prefill token costs 1 / prefill_tps of each stream's time
        assert engine.stall_s == pytest.approx(2 * new / SIM["prefill_tps"], rel=0.1)
    # the client's figure (the median of two: their mean) is the engine's within a few ms over both streams
    assert m[f"interference_{PROMPT}_stall"] == pytest.approx(sum(stalls) / 2, abs=0.01)
    assert m[f"interference_{PROMPT}_gap_before"] > 0 and m[f"interference_{PROMPT}_itl_p99"] > 0
    # after the prefill the streams are back at their pace
    assert m[f"interference_{PROMPT}_gap_after"] == pytest.approx(
        m[f"interference_{PROMPT}_gap_before"], rel=0.3
    )


def test_a_larger_budget_trades_a_longer_gap_for_a_sooner_first_token(by_budget):
    """The simulator's known trade-off: the whole 2,000-token prompt in one step makes one gap of about
    P / prefill_tps = 100 ms; chunks of about 510 tokens make gaps a quarter as long, and the prompt waits for
    the decode part of each of its four steps."""
    big, small = (by_budget[b][0].summary.measures for b in (8192, 512))
    key = f"interference_{PROMPT}"
    assert big[f"{key}_gap_max"] == pytest.approx(0.1 + big[f"{key}_gap_before"], abs=0.012)
    assert small[f"{key}_gap_max"] < 0.5 * big[f"{key}_gap_max"]
    assert small[f"{key}_ttft"] > big[f"{key}_ttft"]
    assert small[f"{key}_stall"] == pytest.approx(big[f"{key}_stall"], rel=0.2)


def test_a_cached_context_prefills_only_the_new_tokens():
    """An agent's next turn: 4,000 tokens of context in the prefix cache (one load request before the window),
    1,000 new ones. The stall is the new tokens' prefill, as the engine's hits say, not the whole prompt's."""
    plan = InterferencePlan((1000,), 2, 320, 16, 2, 0.6, context_tokens=4000)
    with SimOracle(sets={**SIM, "max_num_batched_tokens": 8192}) as sim:
        res = run_bench(sim.url, _plan(plan), BenchOptions(progress=False))
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    recs = [r for r in res.records if r.phase == "interference"]
    assert [r.interference for r in recs].count("load") == 1 and len(recs) == plan.requests()
    arrivals = [truth[r.response_id] for r in recs if r.interference == "arrival"]
    assert len(arrivals) == 2 and all(t["cached_tokens"] >= 4000 - 32 for t in arrivals)
    new = sum(t["prompt_tokens"] - t["cached_tokens"] for t in arrivals) / 2
    assert new < 1100  # the context was served from the cache
    stall = res.summary.measures["interference_1000_stall"]
    assert stall == pytest.approx(2 * new / SIM["prefill_tps"], rel=0.15)
