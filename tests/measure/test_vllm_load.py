"""The load workload against a real vLLM (the CPU build serving labkit's tiny llama; the session's shared lane,
tests/support/vllm_fixtures.py): a closed-loop ladder 1 to 8 and a Poisson rate, each request checked against
the engine's own per-request metrics (--enable-per-request-metrics), each level's counters against the engine's
(docs/measurement.md, "Serving under load"). No assertion is about speed: the client's interval contains the
engine's, the ladder keeps its level in flight, and the level's counted requests are the engine's."""

from __future__ import annotations

import dataclasses

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.measure.request.arrivals import level_seed, send_times
from labkit.recipe import DecodePlan, LoadPlan, MeasurePlan, PrefillPlan
from tests.support.vllm import vllm_available

pytestmark = pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")

LADDER = (1, 2, 4, 8)  # the lane's --max-num-seqs is 8


def _plan(load: LoadPlan) -> MeasurePlan:
    return MeasurePlan(
        "chat", 1, DecodePlan((1,), 0, 16, 0), PrefillPlan((), 1), 120.0, seed=3, workloads={"load": load}
    )


def test_a_ladder_and_a_poisson_rate_on_vllm_agree_with_the_engines_own_figures(vllm_lane):
    options = BenchOptions(progress=False, model="tiny", loops_expected=True, engine_metrics_asked=True)
    ladder = LoadPlan(concurrency=LADDER, level_requests=8, prompt_tokens=64, output_tokens=24)
    closed = run_bench(vllm_lane.url, _plan(ladder), options)
    rate = LoadPlan(rate=(4.0,), arrival="poisson", level_requests=12, prompt_tokens=64, output_tokens=24)
    opened = run_bench(vllm_lane.url, _plan(rate), options)
    for res in (closed, opened):
        recs = [r for r in res.records if r.phase == "load"]
        assert recs and all(r.ok for r in recs), [r.error for r in recs if not r.ok]
        for r in recs:
            # the engine's TTFT (its queue and prefill) happens inside the client's, as its decode inside the
            # client's window; a stamp order, not a speed
            assert r.engine_ttft_s is not None and r.ttft_s is not None and r.ttft_s >= r.engine_ttft_s - 1e-3
            assert r.output_tokens == 24
        for window, entry in res.summary.load.items():
            # the level's window counted exactly its requests on the engine's own counter
            assert res.summary.evidence[window]["finished"] == entry["requests"], window
    m = closed.summary.measures
    for n in LADDER:
        assert m[f"load_peak_concurrency@load={n}"] == n
        assert m[f"load_errors@load={n}"] == 0 and m[f"load_ttft@load={n}@stat=p99"] > 0
        assert closed.summary.load[f"load@load={n}"]["answered"] == 8
        peak = closed.summary.load[f"load@load={n}"].get("peak_running")
        assert peak is None or peak <= n  # the engine never ran more than the level sent
    # the open loop sent on its seeded schedule: the intended gaps are the schedule's, to the nanosecond
    sent = sorted(r.t_intended for r in opened.records if r.phase == "load" and r.t_intended is not None)
    times = send_times(4.0, level_seed(3, 4.0), arrival="poisson", requests=12)
    assert [round((t - sent[0]) / 1e9, 6) for t in sent] == [round(t, 6) for t in times]
    assert opened.summary.measures["load_lateness@rate=4@stat=p50"] >= 0


def test_agentic_sessions_on_a_small_kv_pool_show_the_eviction_cliff(vllm_fresh):
    """A fresh engine, because its KV pool is made small (--num-gpu-blocks-override: 24 blocks of 128 tokens
    on the CPU build, 3,072 tokens): one session's turns find their previous prompt in the prefix cache, eight
    at once (each ~1,000 tokens by its last turn) evict each other. Eager: its speed does not matter here.
    What is asserted is the engine's own counting: the level's hits are its counter's delta and each turn's
    its response's cached_tokens; the cliff is where they fall short of the expected."""
    plan = vllm_fresh.plan(eager=True)
    small = (
        ("--num-gpu-blocks-override", ("24",)),
        ("--max-model-len", ("2048",)),
        ("--enable-prompt-tokens-details", ()),
    )
    args = tuple(a for a in plan.engine.args if a[0] != "--max-model-len") + small
    plan = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, args=args))
    lane = vllm_fresh.lane(plan)
    ep = lane.start()
    options = BenchOptions(progress=False, model=ep.model, loops_expected=True, engine_metrics_asked=True)
    sessions = LoadPlan(sessions=(1, 8), turns=3, prompt_tokens=320, output_tokens=16, tool_tokens=320)
    res = run_bench(ep.base_url, _plan(sessions), options)
    lane.down()
    recs = [r for r in res.records if r.phase == "load"]
    assert recs and all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    m, load = res.summary.measures, res.summary.load
    for level in (1, 8):
        entry = load[f"load@sessions={level}"]
        mine = [r for r in recs if r.load_level == level]
        assert entry["requests"] == level * 3 and entry["hits"]["source"].startswith("the level window")
        # the window's counter delta holds every turn's own cached_tokens
        assert entry["hits"]["engine"] == sum(r.cached_tokens or 0 for r in mine)
    print({k: v for k, v in m.items() if "hit_share" in k or "eviction" in k or "preempt" in k})
    assert m["load_hit_share@sessions=1"] >= 0.9 > m["load_hit_share@sessions=8"]
    assert m["load_eviction_sessions"] == 8 and load["eviction"]["held"][0] == 1
