"""What the per-request schedule models, in the step scheduler (labkit/sim/scheduler.py), recovered from the
sim's truth records on a fake clock: speculative decoding (a decode verifies K drafts, takes 1 + K tokens of the
budget and emits 1 + accepted), per-request rate noise, the idle penalty and decode_ctx_slope, each slowing a
request's share of the step (docs/measurement.md, "The simulator's step scheduler").

A request alone on the engine runs exactly as in the per-request schedule, so the truths are exact there; in a
batch the step's time is the formula's: the base times the slowest member's slowness, plus each member's share
times its own.
"""

from __future__ import annotations

import statistics

import pytest

from labkit.sim.config import build_config
from tests.support.stepsim import BASE, TOK, Sim

SPEC = ("spec_method=mtp", "spec_k=3", "spec_accept=0.9,0.6,0.3")


def _gaps(rec) -> list[float]:
    return [b[0] - a[0] for a, b in zip(rec.emissions, rec.emissions[1:], strict=False)]


def _alone(sim: Sim, prompt: int, tokens: int, gap: float = 0.0):
    """One request run to its end on an otherwise idle engine, `gap` seconds after the last one ended."""
    sim.clock.t += gap
    rec = sim.add(prompt, tokens)
    sim.run()
    return rec


# ---- speculative decoding ---------------------------------------------------------------------------------


def test_a_spec_decode_takes_1_plus_k_tokens_and_emits_1_plus_accepted():
    sim = Sim("max_num_batched_tokens=4096", "record_chunks=true", *SPEC)
    rec = _alone(sim, 16, 3000)
    decodes = [s for s in sim.steps if s.decodes]
    assert all(s.drafts == [3] and s.tokens == 4 for s in decodes)
    assert _gaps(rec) == pytest.approx([BASE + TOK * 4] * len(decodes))  # every decode step: 1 + K tokens
    ems = [e for e in sim.emissions if not e.first]
    assert all(e.drafted == 3 and e.tokens == min(1 + e.accepted, 3000 - e.before) for e in ems)
    # the counters count every step as engine.py does, and the rates come back per position
    c = sim.eng.c
    assert c.spec_drafts == rec.drafts == rec.steps == len(decodes)
    assert c.spec_draft_tokens == 3 * rec.drafts and c.spec_accepted == rec.accepted == sum(
        e.accepted for e in ems
    )
    rates = [n / rec.drafts for n in c.spec_accepted_per_pos]
    se = [(a * (1 - a) / rec.drafts) ** 0.5 for a in (0.9, 0.6, 0.3)]
    assert all(abs(r - a) < 4 * s for r, a, s in zip(rates, (0.9, 0.6, 0.3), se, strict=True)), rates
    # the rate: 1 + accepted tokens per step of BASE + 4 TOK, its mean 1 + 1.8 (the last step truncated)
    span = rec.t_last_target - rec.t_first_target
    assert rec.to_dict()["scheduled_decode_tps"] == pytest.approx(2999 / (rec.steps * (BASE + TOK * 4)))
    assert (rec.completion_tokens - 1) / rec.steps == pytest.approx(2.8, abs=4 * 0.8 / rec.steps**0.5)
    assert span == pytest.approx(rec.steps * (BASE + TOK * 4))


def test_by_default_a_lone_spec_stream_decodes_at_decode_tps():
    """Derived step costs: a decode step of 1 + K tokens lasts (1 + E[accepted]) / decode_tps, as a per-request
    step does, so the mean rate with speculation is decode_tps."""
    cfg = build_config("test", sets=["max_num_batched_tokens=4096", *SPEC])
    base, tok, seq = cfg.step_costs
    assert base + 4 * tok + seq == pytest.approx(cfg.step_time(1, False)) == pytest.approx(2.8 / 200)
    sim = Sim("max_num_batched_tokens=4096", "step_base_s=0", "step_token_s=0", *SPEC)
    rec = _alone(sim, 16, 4000)
    assert rec.t_last_target - rec.t_first_target == pytest.approx(rec.steps * 2.8 / 200)
    assert rec.to_dict()["scheduled_decode_tps"] == pytest.approx(200, rel=0.05)


def test_a_short_budget_verifies_fewer_drafts():
    """Budget 3 and K = 3: the lone decode takes 1 + 2 tokens, so it verifies 2 drafts, and accepts at most 2."""
    sim = Sim("max_num_batched_tokens=3", *SPEC)
    rec = _alone(sim, 16, 400)
    decodes = [s for s in sim.steps if s.decodes]
    assert all(s.drafts == [2] and s.tokens == 3 for s in decodes)
    assert rec.draft_tokens == 2 * rec.drafts and sim.eng.c.spec_accepted_per_pos[2] == 0
    assert (
        rec.accepted == sum(e.accepted for e in sim.emissions) and max(e.accepted for e in sim.emissions) == 2
    )


def test_two_spec_streams_share_the_budget_and_a_preempted_one_recomputes_without_drafts():
    sim = Sim("max_num_batched_tokens=4096", "kv_gpu_blocks=20", "max_model_len=256", *SPEC)
    recs = [sim.add(16, 150) for _ in range(3)]
    sim.run()
    assert all(r.completion_tokens == 150 for r in recs)
    assert sum(r.preemptions for r in recs) == sim.eng.c.preemptions > 0
    # every step is a verify step but the one ending a recompute; the counters agree with the records
    assert all(r.steps - r.drafts == r.preemptions for r in recs)
    assert sim.eng.c.spec_drafts == sum(r.drafts for r in recs)
    for s in sim.steps:
        assert s.tokens == 4 * len(s.decodes) + sum(n for _, n in s.chunks)
        assert s.end - s.start == pytest.approx(BASE * bool(s.decodes) + TOK * s.tokens)
    assert sim.sched.used_blocks == 0


# ---- per-request rate noise ------------------------------------------------------------------------------


def test_decode_noise_sets_a_lone_requests_rate_as_in_the_per_request_schedule():
    sim = Sim("max_num_batched_tokens=4096", "decode_noise=0.2", "seed=5", "step_base_s=0", "step_token_s=0")
    tok = sim.cfg.step_costs[1]
    recs = [_alone(sim, 16, 40) for _ in range(6)]
    factors = [r.rate_factor for r in recs]
    assert factors == [sim.cfg.rate_factor(i) for i in range(1, 7)] and len(set(factors)) == 6
    for r in recs:
        assert r.to_dict()["scheduled_decode_tps"] == pytest.approx(200 * r.rate_factor)
        # its prefill is not slowed, as in the per-request schedule
        assert r.t_first_target - r.t_arrival == pytest.approx(tok * 16)


def test_in_a_batch_each_noisy_request_slows_its_share_and_the_slowest_the_base():
    sim = Sim("max_num_batched_tokens=4096", "decode_noise=0.3", "seed=2", "step_seq_s=0.002")
    a, b = sim.add(16, 30), sim.add(16, 30)
    sa, sb = 1 / a.rate_factor, 1 / b.rate_factor
    assert sa != sb
    sim.run()
    both = BASE * max(sa, sb) + (TOK + 0.002) * (sa + sb)
    assert _gaps_of(sim, a) == pytest.approx([both] * 29)
    assert a.t_last_target == b.t_last_target  # one step, one time: both streams at the same rate


def _gaps_of(sim: Sim, rec) -> list[float]:
    ends = [s.end for s in sim.steps if any(q.rec is rec for q in s.decodes)]
    starts = [s.start for s in sim.steps if any(q.rec is rec for q in s.decodes)]
    return [e - s for s, e in zip(starts, ends, strict=True)]


# ---- the idle penalty -------------------------------------------------------------------------------------


def test_the_idle_penalty_slows_the_first_request_after_idle_prefill_and_decode():
    F = 1.6
    sim = Sim("max_num_batched_tokens=8192", "idle_after_s=1", f"idle_factor={F}")
    warm = _alone(sim, 1000, 20)
    idle = _alone(sim, 1000, 20, gap=2.0)
    soon = _alone(sim, 1000, 20, gap=0.5)  # within idle_after_s of the last end: warm
    assert (warm.idle, idle.idle, soon.idle) == (False, True, False)
    ttft = [r.t_first_target - r.t_arrival for r in (warm, idle, soon)]
    assert ttft == pytest.approx([TOK * 1000, F * TOK * 1000, TOK * 1000])
    rates = [r.to_dict()["scheduled_decode_tps"] for r in (warm, idle, soon)]
    assert rates == pytest.approx([1 / (BASE + TOK), 1 / (F * (BASE + TOK)), 1 / (BASE + TOK)])
    assert rates[0] / rates[1] == pytest.approx(F) and ttft[1] / ttft[0] == pytest.approx(F)


def test_a_request_joining_an_idle_turn_is_not_slowed_but_shares_its_slow_base():
    F = 2.0
    sim = Sim("max_num_batched_tokens=8192", "idle_after_s=1", f"idle_factor={F}")
    _alone(sim, 16, 5)
    sim.clock.t += 2.0
    idle = sim.add(16, 40)
    sim.step()
    other = sim.add(16, 40)
    assert idle.idle and not other.idle
    sim.run()
    both = [s for s in sim.steps if len(s.decodes) == 2]
    assert both and all(s.end - s.start == pytest.approx(F * BASE + F * TOK + TOK) for s in both)


# ---- decode_ctx_slope -------------------------------------------------------------------------------------


def test_decode_ctx_slope_is_recovered_from_lone_requests_rates():
    slope = 0.25
    sim = Sim("max_num_batched_tokens=8192", f"decode_ctx_slope={slope}", "step_base_s=0", "step_token_s=0")
    depths = (16, 1000, 3000, 6000)
    recs = [_alone(sim, p, 30) for p in depths]
    rates = [r.to_dict()["scheduled_decode_tps"] for r in recs]
    for p, rate in zip(depths, rates, strict=True):
        assert rate == pytest.approx(200 / (1 + slope * p / 1000))
    # the slope a benchmark would fit from two depths: (r_a / r_b - 1) against the context added
    fitted = [
        (rates[0] / r * (1 + slope * 16 / 1000) - 1) / (p / 1000) for p, r in zip(depths, rates, strict=True)
    ]
    assert statistics.fmean(fitted[1:]) == pytest.approx(slope)
    # the prefill is not slowed by its context beyond its tokens
    assert recs[-1].t_first_target - recs[-1].t_arrival == pytest.approx(6000 / 20_000)
