"""The load workload on the simulator's step mode (labkit/sim/scheduler.py: a token budget, a cap on running
requests and a KV pool in blocks with preemption), whose truths say each request's queue time and preemptions:
a level within the engine's caps neither queues long nor preempts; one past them queues, and the level's
preemptions, engine queue time and sampled gauges are the engine's own (docs/measurement.md, "Serving under
load")."""

from __future__ import annotations

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.recipe import DecodePlan, LoadPlan, MeasurePlan, PrefillPlan
from labkit.sim.oracle import SimOracle

# 64 + 32 tokens a request = 6 blocks of 16; 32 blocks hold 5 such requests, and 6 may run: the 6th preempts
STEPS = {
    "decode_tps": 50,
    "prefill_tps": 20000,
    "max_num_batched_tokens": 256,
    "max_num_seqs": 6,
    "max_model_len": 512,
    "kv_gpu_blocks": 32,
    "block_size": 16,
}


def test_a_level_past_the_engines_caps_queues_and_preempts_as_its_truth_says():
    plan = MeasurePlan(
        "chat",
        1,
        DecodePlan((1,), 0, 16, 0),
        PrefillPlan((), 1),
        30.0,
        workloads={
            "load": LoadPlan(concurrency=(2, 8), level_requests=24, prompt_tokens=64, output_tokens=32)
        },
    )
    with SimOracle(sets=STEPS) as sim:
        res = run_bench(sim.url, plan, BenchOptions(progress=False))
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    m = res.summary.measures
    for level in (2, 8):
        recs = [truth[r.response_id] for r in res.records if r.phase == "load" and r.load_level == level]
        assert len(recs) == 24
        # the window's counter deltas are exactly the level's requests' own
        assert m[f"load_preemptions@load={level}"] == sum(t["preemptions"] for t in recs)
        queue = sum(t["t_scheduled"] - t["t_arrival"] for t in recs) / len(recs)
        assert m[f"load_queue@load={level}"] == pytest.approx(queue, rel=1e-6)
    assert m["load_preemptions@load=2"] == 0 and m["load_preemptions@load=8"] > 0
    assert m["load_queue@load=8"] > 5 * m["load_queue@load=2"]  # two streams beyond the cap of 6 wait
    entry = res.summary.load["load@load=8"]
    assert entry["gauges"] and all(len(g) == 4 for g in entry["gauges"])  # [s, running, waiting, KV usage]
    assert entry["peak_running"] <= 6 and entry["peak_waiting"] >= 2 and entry["peak_kv_usage"] > 0.8
