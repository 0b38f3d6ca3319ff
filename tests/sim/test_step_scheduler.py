"""The simulator's step scheduler (labkit/sim/scheduler.py) driven step by step with a fake clock: the budget goes
to decodes first, a long prompt is prefilled in chunks and its TTFT is the sum of its steps' times, max_num_seqs
queues the rest, the KV pool preempts at the load its block count predicts, and the gauges are exact.

Every expected number is computed from the settings (step time = base + per token x tokens + per sequence x
sequences); nothing here reads a real clock.
"""

from __future__ import annotations

import argparse
import math
import statistics

import pytest

from labkit.sim import add_cli_arguments
from labkit.sim.config import SimConfigError, build_config
from tests.support.stepsim import BASE, TOK, Arrival, Sim


def blocks(tokens: int, bs: int = 16) -> int:
    return math.ceil(tokens / bs)


# ---- the step formula and the budget ----------------------------------------------------------------------


def test_a_lone_decode_runs_at_decode_tps_and_a_prefill_at_prefill_tps_by_default():
    """Derived costs (preset test: decode 200 t/s, prefill 20k t/s, batch_beta 0.5): a decode's share of a step
    is batch_beta / 200 s, the base the rest of a lone decode step, a prompt's token 1 / 20k s."""
    cfg = build_config("test", sets=["max_num_batched_tokens=100000"])
    base, tok, seq = cfg.step_costs
    assert tok == 1 / 20_000 and base == pytest.approx(0.5 / 200) and tok + seq == pytest.approx(0.5 / 200)
    sim = Sim("step_base_s=0", "step_token_s=0", "max_num_batched_tokens=100000")
    rec = sim.add(2000, 41)
    sim.run()
    assert rec.t_first_target - rec.t_arrival == pytest.approx(2000 / 20_000)  # prefill alone: its tokens
    assert rec.to_dict()["scheduled_decode_tps"] == pytest.approx(200)
    assert rec.to_dict()["true_prefill_tps"] == pytest.approx(20_000)


@pytest.mark.parametrize("beta", [0.0, 0.3, 0.5, 1.0, 1.5])
def test_by_default_b_streams_decode_as_batch_beta_says(beta):
    """The per-request schedule's batch effect: b streams decode at decode_tps / (1 + beta (b - 1)) each (beta
    above 1 as 1), from the derived base and decode cost."""
    for b in (1, 2, 5):
        sim = Sim("step_base_s=0", "step_token_s=0", "max_num_batched_tokens=8192", f"batch_beta={beta}")
        recs = [sim.add(16, 41) for _ in range(b)]
        sim.run()
        rate = recs[0].to_dict()["scheduled_decode_tps"]
        assert rate == pytest.approx(200 / (1 + min(beta, 1) * (b - 1)))
        assert rate == pytest.approx(1 / sim.cfg.step_time(b, False)) or beta > 1


def test_decodes_come_first_and_a_prefill_chunk_fills_the_rest_of_the_budget():
    sim = Sim("max_num_batched_tokens=256")
    streams = [sim.add(16, 50) for _ in range(3)]
    sim.step()  # the three prompts, one chunk each
    assert all(r.completion_tokens == 1 for r in streams)
    long = sim.add(1000, 2)
    step = sim.step()
    assert [s.rec for s in step.decodes] == streams  # admission order
    assert [(s.rec, n) for s, n in step.chunks] == [(long, 256 - 3)]
    assert step.end - step.start == pytest.approx(BASE + TOK * 256)
    # while the long prompt is prefilled the streams' gaps are whole-budget steps; after, three-token steps
    gaps = []
    while long.t_first is None:
        gaps.append(sim.step().end - sim.steps[-1].start)
    assert gaps == pytest.approx([BASE + TOK * 256] * 2 + [BASE + TOK * (3 + 1000 - 3 * 253)])
    after = sim.step()
    assert after.end - after.start == pytest.approx(BASE + TOK * 4)  # three decodes and the long one's


def test_a_long_prompt_spans_ceil_p_over_b_steps_and_its_ttft_is_the_sum_of_their_times():
    sim = Sim("max_num_batched_tokens=300")
    rec = sim.add(1000, 3)
    sim.run()
    assert rec.prefill_chunks == 4 == math.ceil(1000 / 300)
    prefill = sim.steps[:4]
    assert rec.t_first_target - rec.t_arrival == pytest.approx(sim.times(prefill))
    assert rec.t_first_target - rec.t_arrival == pytest.approx(1000 * TOK)  # no decodes: no base
    assert rec.t_scheduled == rec.t_prefill_start == rec.t_arrival and rec.t_prefill_end == rec.t_first_target
    assert [e.tokens for e in sim.emissions] == [1, 1, 1] and sim.emissions[-1].done


def test_step_seq_s_adds_a_cost_per_decode_and_a_step_without_decodes_has_no_base():
    sim = Sim("max_num_batched_tokens=512", "step_seq_s=0.002")
    for _ in range(4):
        sim.add(10, 5)
    first = sim.step()  # four prompts, no decode: their tokens alone
    assert first.end - first.start == pytest.approx(TOK * 40)
    second = sim.step()
    assert second.end - second.start == pytest.approx(BASE + TOK * 4 + 0.002 * 4)


# ---- max_num_seqs: the waiting queue ------------------------------------------------------------------------


def test_max_num_seqs_queues_requests_in_arrival_order_and_their_queue_times_add_up():
    sim = Sim("max_num_batched_tokens=512", "max_num_seqs=2")
    P, N, n = 100, 20, 7
    recs = [sim.add(P, N) for _ in range(n)]
    sim.step()
    assert (len(sim.sched.running), len(sim.sched.waiting)) == (2, n - 2)
    sim.run()
    # two at a time, in lockstep: a pair's service is one prefill step of both prompts and N-1 two-decode steps
    service = TOK * 2 * P + (N - 1) * (BASE + TOK * 2)
    queue = [r.t_scheduled - r.t_arrival for r in recs]
    assert queue == pytest.approx([0, 0, service, service, 2 * service, 2 * service, 3 * service], abs=1e-9)
    # the last one runs alone: prefill of one prompt, then one-decode steps
    last = recs[-1]
    assert last.t_last_target - last.t_scheduled == pytest.approx(TOK * P + (N - 1) * (BASE + TOK))


def test_ttft_percentiles_goodput_and_throughput_from_the_truths():
    """What a benchmark reads from a run, recovered from the records: the queue makes TTFT a staircase."""
    sim = Sim("max_num_batched_tokens=4096", "max_num_seqs=1")
    P, N, n = 200, 10, 10
    recs = [sim.add(P, N) for _ in range(n)]
    sim.run()
    service = TOK * P + (N - 1) * (BASE + TOK)
    ttft = [r.t_first_target - r.t_arrival for r in recs]
    assert ttft == pytest.approx([k * service + TOK * P for k in range(n)])
    cuts = statistics.quantiles(ttft, n=100, method="inclusive")
    assert cuts[49] == pytest.approx(4.5 * service + TOK * P)  # p50 between the 5th and 6th
    slo = 3 * service  # goodput: requests whose TTFT meets the SLO, per second of the run
    makespan = max(r.t_last_target for r in recs) - min(r.t_arrival for r in recs)
    assert makespan == pytest.approx(n * service)
    good = sum(t <= slo for t in ttft)
    assert good == 3 and good / makespan == pytest.approx(3 / (n * service))
    # capacity: tokens per second of the run against the formula's at batch 1
    tokens = sum(r.completion_tokens for r in recs)
    assert tokens / makespan == pytest.approx(N / service)


def test_batch_throughput_grows_with_the_batch_as_the_formula_says():
    """Decode capacity: b streams in lockstep emit b tokens per step of BASE + TOK x b."""
    for b in (1, 4, 16):
        sim = Sim("max_num_batched_tokens=8192")
        recs = [sim.add(16, 101) for _ in range(b)]
        sim.run()
        span = recs[0].t_last_target - recs[0].t_first_target
        assert 100 / span == pytest.approx(1 / (BASE + TOK * b))
        assert all(r.t_last_target == recs[0].t_last_target for r in recs)


# ---- the KV pool: preemption ----------------------------------------------------------------------------


def _pool(c: int, blocks_: int, tokens: int) -> Sim:
    sim = Sim("max_num_batched_tokens=4096", f"kv_gpu_blocks={blocks_}", "max_model_len=256")
    for _ in range(c):
        sim.add(16, tokens)
    return sim


@pytest.mark.parametrize("c", [1, 2, 3, 4, 5, 6])
def test_preemption_starts_where_the_block_count_says(c):
    """c requests of 16 prompt tokens and 80 output tokens each need ceil((16 + 79) / 16) = 6 blocks at their
    last decode: 24 blocks hold four; a fifth makes the pool preempt."""
    sim = _pool(c, 24, 80)
    peak = 0
    while sim.step() is not None:
        peak = max(peak, sim.sched.used_blocks)
        assert sim.sched.used_blocks <= 24
    recs = sim.eng.records
    assert all(r.completion_tokens == 80 for r in recs)
    preempted = sum(r.preemptions for r in recs)
    assert preempted == sim.eng.c.preemptions
    assert (preempted > 0) == (c * blocks(16 + 79) > 24)
    if c <= 4:
        assert peak == c * 6


def test_the_first_preemption_comes_at_the_step_the_blocks_run_out():
    """Four requests in lockstep need 4 x ceil((16 + g) / 16) blocks for their decode after g tokens: 20 blocks
    last until g = 64; the decode after the 65th token preempts the most recently admitted, which recomputes."""
    sim = _pool(4, 20, 100)
    while not sim.steps or not sim.steps[-1].preempted:
        assert sim.step() is not None
    step = sim.steps[-1]
    first, *_, last = sim.eng.records
    assert [s.rec for s in step.preempted] == [last]
    assert first.completion_tokens == 66 and last.completion_tokens == 65
    assert (len(sim.sched.running), len(sim.sched.waiting)) == (3, 1)
    assert sim.sched.used_blocks == 3 * blocks(16 + 65)
    sim.run()
    assert last.preemptions == 1 and last.prefill_chunks == 2 and last.completion_tokens == 100
    # its recompute prefills its prompt and the 65 tokens it had, in one chunk, and emits its 66th token
    redo = next(s for s in sim.steps if any(q.rec is last for q, _ in s.chunks) and s.number > 1)
    assert [n for q, n in redo.chunks if q.rec is last] == [16 + 65]


def test_gauges_are_exact_between_steps():
    sim = Sim("max_num_batched_tokens=64", "max_num_seqs=2", "kv_gpu_blocks=512")
    sched = sim.sched
    for _ in range(3):
        sim.add(100, 4)
    assert (len(sched.running), len(sched.waiting), sched.kv_usage) == (0, 3, 0.0)
    sim.step()  # one chunk of 64 of the first prompt; the second waits for budget, not for a slot
    assert (len(sched.running), len(sched.waiting)) == (1, 2)
    assert sched.kv_usage == pytest.approx(blocks(100) / 512)
    sim.step()  # 36 more of the first, 28 of the second: two running, the third held by max_num_seqs
    assert (len(sched.running), len(sched.waiting)) == (2, 1)
    assert sched.kv_usage == pytest.approx(2 * blocks(100) / 512)
    sim.run()
    assert (len(sched.running), len(sched.waiting), sched.used_blocks) == (0, 0, 0)


def test_dropping_a_request_frees_its_blocks_and_slot():
    sim = Sim("max_num_batched_tokens=512", "max_num_seqs=1")
    a, b = sim.add(40, 50), sim.add(40, 5)
    sim.step()
    sim.sched.drop(a)  # the client went away
    assert sim.sched.used_blocks == 0 and not sim.sched.running
    sim.run()
    assert b.completion_tokens == 5 and a.completion_tokens == 1


def test_a_request_joins_the_first_step_that_starts_after_it_arrived():
    sim = Sim("max_num_batched_tokens=512")
    a = sim.add(10, 30)
    sim.run((Arrival(sim.clock.t + 0.035, 10, 3),))
    b = sim.eng.records[1]
    joined = next(s for s in sim.steps if any(q.rec is b for q, _ in s.chunks))
    # the step running when it arrived goes on without it; it is prefilled in the next one
    assert joined.start == b.t_scheduled == min(s.end for s in sim.steps if s.end >= b.t_arrival)
    assert a.completion_tokens == 30 and b.completion_tokens == 3


# ---- settings and flags -------------------------------------------------------------------------------------


def test_step_mode_checks_its_pool_and_budget_naming_the_key():
    with pytest.raises(SimConfigError, match="kv_cache_tokens.*max_model_len=8192"):
        build_config("test", sets=["max_num_batched_tokens=512", "kv_gpu_blocks=100"])
    with pytest.raises(SimConfigError, match="max_num_batched_tokens: must be >= 0"):
        build_config("test", sets=["max_num_batched_tokens=-1"])


def test_vllm_flag_spellings_set_the_step_keys():
    p = argparse.ArgumentParser()
    add_cli_arguments(p)
    a = p.parse_args(["--preset", "test", "--max-num-batched-tokens", "2048", "--max-num-seqs", "8"])
    cfg = build_config(a.preset, None, a.sets)
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs, cfg.step_mode) == (2048, 8, True)
