"""One declaration of the run settings: what a lane plan fixes, and what reaches the workloads' context."""

from __future__ import annotations

import dataclasses

from labkit.measure import BenchOptions
from labkit.measure.session import RunContext, RunSettings
from labkit.recipe.lookup import load_plan


def test_with_lane_sets_what_the_lane_fixes_and_keeps_the_callers_options():
    plan = load_plan("dsv41-flash-1017-4x-vllm032", spec="dspark")
    o = BenchOptions(model="m", cold_expected=False, progress=False, run_id="r").with_lane(plan)
    assert (o.lane, o.recipe_hash, o.variant) == (plan.label, plan.recipe_hash, plan.variant_id)
    assert (o.spec_k, o.spec_k_source) == (5, "recipe --speculative-config num_speculative_tokens")
    assert (o.loops_expected, o.engine_metrics_asked) == (plan.model.loops, plan.engine_metrics_asked)
    assert (o.model, o.cold_expected, o.progress, o.run_id) == ("m", False, False, "r")
    bare = BenchOptions().with_lane(load_plan("tiny-vllm"))
    assert (bare.spec_k, bare.spec_k_source, bare.loops_expected) == (None, "", True)


def test_options_and_context_share_the_settings_and_their_meaning():
    shared = {f.name for f in dataclasses.fields(RunSettings)}
    context_only = {f.name for f in dataclasses.fields(RunContext)} - shared
    assert context_only == {"client", "plan", "api", "run_id", "telemetry", "t_origin"}
    assert shared <= {f.name for f in dataclasses.fields(BenchOptions)}
    assert BenchOptions().cold_expected and not RunSettings().cold_expected  # a bare endpoint: just booted
