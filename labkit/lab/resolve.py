"""Recipe to plan for the notebook API: resolve with variants and overrides, show the commands."""

from __future__ import annotations

import dataclasses

from labkit.recipe import (
    LanePlan,
    Recipe,
    find_recipe,
    load_recipe,
    with_agentic,
    with_content,
    with_depth,
    with_load,
    with_nodes,
    with_prefill,
)


def plan(
    recipe: str = "sim",
    spec: str | None = None,
    staging: str | None = None,
    *,
    nodes: str | list[str] | None = None,
    runs: int | None = None,
    variants: dict[str, str] | None = None,
    prefill: int | str | list[int] | None = None,
    content: str | list[str] | None = None,
    depth: int | str | list[int] | None = None,
    agentic: int | str | None = None,
    load: int | str | list[int | str] | None = None,
) -> LanePlan:
    """Resolve a recipe with variants and optional overrides (nodes, runs, prefill, content, depth, agentic,
    load) into a LanePlan.

    `spec`/`staging` given as None or "none" on a recipe without that axis are ignored, so one notebook
    default works for every recipe; any other value on a missing axis is an error naming the recipe.
    `prefill` ("4096" or a list) replaces the prompt lengths of `measure.prefill` ("" none),
    `content` ("prose,code" or a list) replaces `measure.content`, `depth` ("0,8192" or a list) the depths of
    `[measure.depth]`, `agentic` (turns per session; 0: none) the sessions of `[measure.agentic]`, `load`
    ("1,2,4,8" streams or "0.5/s,1/s" rates; "" none) the levels of `[measure.load]`; None keeps the recipe's.
    """
    rec = load_recipe(find_recipe(recipe))
    resolved = overridden(rec.resolve(choices_for(rec, spec, staging, variants)), nodes, runs)
    resolved = resolved if prefill is None else with_prefill(resolved, prefill)
    resolved = resolved if content is None else with_content(resolved, content)
    resolved = resolved if depth is None else with_depth(resolved, depth)
    resolved = resolved if agentic is None else with_agentic(resolved, agentic)
    return resolved if load is None else with_load(resolved, load)


def choices_for(rec: Recipe, spec: str | None, staging: str | None, variants: dict[str, str] | None) -> dict:
    """The variant choices `plan` resolves: `variants`, then spec and staging unless None (or "none" on a
    recipe without that axis)."""
    choices = dict(variants or {})
    for axis, value in (("spec", spec), ("staging", staging)):
        if value is None or (value == "none" and axis not in rec.axes):
            continue
        choices[axis] = value
    return choices


def overridden(plan: LanePlan, nodes: str | list[str] | None, runs: int | None) -> LanePlan:
    """The plan with other nodes and/or another number of runs, when given."""
    if nodes:  # names and tp*pp*dp = nodes x gpus_per_node checked again (labkit.recipe.with_nodes)
        plan = with_nodes(plan, nodes)
    if runs:
        plan = dataclasses.replace(plan, measure=dataclasses.replace(plan.measure, runs=int(runs)))
    return plan


def commands(plan: LanePlan) -> dict[str, str]:
    """{node: the exact command it would run}, pointing at where a labkit-built model will be (nothing is
    built or contacted); the plan itself stays as resolved."""
    from labkit import tinymodel
    from labkit.serve import lane_commands

    return lane_commands(tinymodel.materialize(plan, build=False))


def describe(plan: LanePlan) -> str:
    """The resolved plan and the exact command each node would run (nothing is contacted)."""
    from labkit.recipe import describe_plan

    return describe_plan(plan, commands(plan))


def spec_k(plan: LanePlan) -> int | None:
    """K (draft tokens per step) when the recipe states it; None lets the measurement read it from /metrics."""
    from labkit.measure import configured_k

    found = configured_k(plan.engine)
    return found[0] if found else None
