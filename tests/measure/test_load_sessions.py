"""Agentic session levels of the load workload against the simulator, whose prefix cache is a least-recently-used
pool of `kv_cache_tokens` (docs/measurement.md, "Agentic load"): every turn's hits and TTFT are in its ground
truth, so the level's hit share, the eviction cliff and each session's think time can be checked against it."""

from __future__ import annotations

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.measure.summary.latency import percentile
from labkit.recipe import DecodePlan, LoadPlan, MeasurePlan, PrefillPlan, SloPlan
from labkit.sim.oracle import SimOracle

# 100 blocks of 16 tokens: a session's last turn holds ~20 blocks, so 2 sessions fit beside each other and 8
# (~160 blocks, visited in turn) evict each other's prefixes before their next turn; a window of 1,024 tokens,
# as the step scheduler starts only with a pool that holds one request of the whole window
SMALL_CACHE = {
    "decode_tps": 400,
    "prefill_tps": 40000,
    "batch_beta": 0.05,
    "kv_cache_tokens": 1600,
    "max_model_len": 1024,
}
THINK_S = 0.05


def _plan(load: LoadPlan, slo: SloPlan | None = None) -> MeasurePlan:
    workloads: dict = {"load": load}
    if slo is not None:
        workloads["slo"] = slo
    return MeasurePlan(
        "chat", 1, DecodePlan((1,), 0, 16, 0), PrefillPlan((), 1), 30.0, seed=3, workloads=workloads
    )


def _sessions(**kw) -> LoadPlan:
    base = {"prompt_tokens": 64, "output_tokens": 16, "tool_tokens": 64, "turns": 4, "warmup": 1}
    return LoadPlan(**{**base, **kw})


@pytest.fixture(scope="module")
def cliff():
    """Levels of 2 and 8 sessions on the small cache, with their records and the simulator's truth."""
    with SimOracle(sets=SMALL_CACHE) as sim:
        res = run_bench(
            sim.url, _plan(_sessions(sessions=(2, 8), think_s=THINK_S)), BenchOptions(progress=False)
        )
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    return res, truth


def test_each_session_runs_its_turns_growing_and_waits_its_think_time(cliff):
    res, _ = cliff
    load = [r for r in res.records if r.phase == "load"]
    assert all(r.ok and r.load_loop == "sessions" for r in load)
    for level in (2, 8):
        recs = [r for r in load if r.load_level == level]
        assert sorted({r.session for r in recs}) == list(range(level)) and len(recs) == level * 4
        for n in range(level):
            turns = sorted((r for r in recs if r.session == n), key=lambda r: r.turn)
            assert [r.turn for r in turns] == [1, 2, 3, 4]
            # the conversation grows: each prompt holds the previous prompt, its answer and a tool result
            depths = [r.prompt_tokens for r in turns]
            assert all(b > a + 16 + 32 for a, b in zip(depths, depths[1:], strict=False)), depths
            for prev, rec in zip(turns, turns[1:], strict=False):
                assert rec.t_send - prev.t_end >= THINK_S * 1e9  # the think time, after the answer's end
                assert rec.t_intended is not None and rec.lateness_s is not None and rec.lateness_s >= 0
    entry = res.summary.load["load@sessions=8"]
    assert entry["loop"] == "sessions" and entry["level"] == 8 and entry["requests"] == 32
    assert [t["turn"] for t in entry["turns"]] == [1, 2, 3, 4]
    assert all(f"load_turn_ttft_t{t}@sessions=8" in res.summary.measures for t in (1, 2, 3, 4))
    assert "load_ttft@sessions=8@stat=p99" in res.summary.measures
    # a session's turns hit the prefix cache by design: no level of them is flagged for it
    assert not [f for f in res.summary.flags if f["code"] == "prefix-cache-hit"], res.summary.flags


def test_the_hit_share_is_the_engines_hits_over_the_expected_and_the_cliff_is_where_it_falls(cliff):
    res, truth = cliff
    load = [r for r in res.records if r.phase == "load"]
    shares = {}
    for level in (2, 8):
        recs = [r for r in load if r.load_level == level]
        true_hits = sum(truth[r.response_id]["cached_tokens"] for r in recs)
        expected = sum(r.hit_expected for r in recs if r.hit_expected is not None)
        # the engine's hits are the window's counter delta: every hit the simulator gave the level's turns
        assert res.summary.load[f"load@sessions={level}"]["hits"]["engine"] == true_hits
        assert res.summary.measures[f"load_hit_share@sessions={level}"] == pytest.approx(true_hits / expected)
        # each turn's own hits (the response's cached_tokens) are the truth's too
        assert all(r.hit_engine == truth[r.response_id]["cached_tokens"] for r in recs)
        shares[level] = true_hits / expected
    assert shares[2] >= 0.9 > shares[8]  # 2 sessions fit in the cache, 8 evict each other
    assert res.summary.measures["load_eviction_sessions"] == 8
    ev = res.summary.load["eviction"]
    assert ev["onset"] == 8 and ev["held"][0] == 2 and ev["share"] == pytest.approx(shares[8])


def test_turn_ttft_is_the_median_of_the_sessions_turn(cliff):
    res, _ = cliff
    load = [r for r in res.records if r.phase == "load"]
    for level in (2, 8):
        for turn in (1, 4):
            recs = [r for r in load if r.load_level == level and r.turn == turn]
            assert res.summary.measures[f"load_turn_ttft_t{turn}@sessions={level}"] == pytest.approx(
                percentile([r.ttft_s for r in recs], 50.0)
            )


def test_session_capacity_is_the_most_sessions_within_the_slo():
    """A TTFT bound the evicting level misses: the search climbs 1, 2, 8 sessions, bisects, and says where."""
    plan = _plan(
        _sessions(sessions=(1, 2, 8), turns=3, profile="capacity", think_s=0.0),
        SloPlan(ttft_s=10.0, percentile=50.0),
    )
    with SimOracle(sets=SMALL_CACHE) as sim:
        res = run_bench(sim.url, plan, BenchOptions(progress=False))
    cap = res.summary.load["capacity"]
    assert cap["loop"] == "sessions" and cap["value"] == res.summary.measures["load_capacity_sessions"]
    # a generous bound: every level meets it, so the ladder's top is the capacity, met in 3 passes
    assert cap["value"] == 8 and cap["miss"] is None and cap["passes"] == 3
