"""Shared prompt seeds: the same text place by place across runs and lanes, a fresh nonce on every prompt."""

from __future__ import annotations

import dataclasses

from labkit.measure.prompt import prompts as pr
from labkit.measure.runner import Bench
from labkit.measure.session import RunContext
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan


def _body(prompt: str) -> str:
    return prompt.split("] ", 1)[1]


def test_seeded_texts_repeat_and_nonces_stay_fresh():
    a, b = pr.nonce(), pr.nonce()
    assert pr.decode_prompt(a, "7/0:0:c1.1") != pr.decode_prompt(b, "7/0:0:c1.1")  # nonces differ
    assert _body(pr.decode_prompt(a, "7/0:0:c1.1")) == _body(pr.decode_prompt(b, "7/0:0:c1.1"))
    assert _body(pr.prefill_prompt(a, 300, "s")) == _body(pr.prefill_prompt(b, 300, "s"))
    # without a seed the text follows the nonce, so two prompts share nothing beyond the instruction
    assert _body(pr.prefill_prompt(a, 300)) != _body(pr.prefill_prompt(b, 300))
    assert _body(pr.decode_prompt(a, "7/0:0:c1.1")) != _body(pr.decode_prompt(a, "7/1:0:c1.1"))


def test_text_seed_names_seed_repetition_and_place():
    plan = MeasurePlan("chat", 1, DecodePlan((1,), 1, 8, 0), PrefillPlan((), 1), 10.0)
    ctx = RunContext(client=None, plan=plan, model="m", api="chat", run_id="r", prompt_seed="7/2")  # type: ignore[arg-type]
    bench = Bench(ctx, progress=False)
    bench.rep = 1
    assert bench.text_seed("c1.3") == "7/2:1:c1.3"
    assert ctx.text_seed(1, "c1.3") == "7/2:1:c1.3"
    unseeded = dataclasses.replace(ctx, prompt_seed=None)
    assert Bench(unseeded, progress=False).text_seed("c1.3") is None
