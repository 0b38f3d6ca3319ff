"""Overrides of a resolved plan, checked as the recipe's own values are: `with_nodes` puts a lane on other
nodes (the notebook's `nodes` parameter, `labkit.lab.plan(nodes=...)`), `with_content` measures other prompt
content categories (the notebook's `content` parameter).

A plan is frozen, so an override returns a new one. Its `resolved` table and `recipe_hash` record the
override, so a run folder says which nodes ran; the lane id stays the recipe's and variant's.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

import labkit.recipe.names as names
import labkit.recipe.schema as s
from labkit.errors import RecipeError
from labkit.measures import CONTENT
from labkit.recipe.build import recipe_hash
from labkit.recipe.depthplan import check_depth_window, context_window, depth_fields, depth_plan
from labkit.recipe.plan import LanePlan
from labkit.recipe.rules import check_target_keys, parallel_problem, world_size


def with_nodes(plan: LanePlan, nodes: str | Sequence[str]) -> LanePlan:
    """`plan` on `nodes` ("dgx5,dgx6" or a list; the first is the head).

    Each name must be a host name or IP address, without duplicates, and the lane's parallelism must still
    fill nodes × `cluster.gpus_per_node` (tp·pp·dp = 4 is refused on three one-GPU nodes). Fabric addresses
    are kept for the nodes still in the lane; the others are detected at boot. A RecipeError names the
    recipe file, the key and the override.
    """
    given = nodes.split(",") if isinstance(nodes, str) else list(nodes)
    items = [n.strip() if isinstance(n, str) else n for n in given]
    items = [n for n in items if n != ""]
    shown = ", ".join(str(n) for n in items) or "(no nodes)"
    where = f" (nodes override: {shown})"
    c = plan.cluster
    try:
        checked = tuple(s.array(names.node_name, nonempty=True, unique=True)(items, "cluster.nodes"))
        world = world_size(plan.engine.kind, dataclasses.asdict(plan.engine.parallel), dict(plan.engine.args))
        problem = parallel_problem(plan.engine.kind, world, len(checked), c.gpus_per_node)
        if problem:
            raise s.Invalid("cluster.nodes", problem)
    except s.Invalid as e:
        raise RecipeError(plan.file, e.key, e.message + where)
    fabric = c.fabric.for_nodes(checked) if c.fabric else None
    resolved = copy.deepcopy(plan.resolved)
    if resolved:
        cluster = resolved["cluster"]
        cluster["nodes"] = list(checked)
        for key in ("addresses", "interfaces") if cluster.get("fabric") else ():
            if key in cluster["fabric"]:
                table = cluster["fabric"][key]
                cluster["fabric"][key] = {n: a for n, a in table.items() if n in checked}
    return dataclasses.replace(
        plan,
        cluster=dataclasses.replace(c, nodes=checked, fabric=fabric),
        resolved=resolved,
        recipe_hash=recipe_hash(plan.recipe, dict(plan.variants), resolved) if resolved else plan.recipe_hash,
    )


def with_content(plan: LanePlan, content: str | Sequence[str]) -> LanePlan:
    """`plan` measuring these prompt content categories ("prose,code" or a list; empty: none, only the default
    synthetic prose), checked as `measure.content` is, with the target measures it leaves; a RecipeError names the recipe file, the key and the
    override. docs/measurement.md, "Prompt content"."""
    given = content.split(",") if isinstance(content, str) else list(content)
    items = [c.strip() if isinstance(c, str) else c for c in given]
    items = [c for c in items if c != ""]
    try:
        checked = tuple(s.array(s.choice(*CONTENT), unique=True)(items, "measure.content"))
    except s.Invalid as e:
        raise RecipeError(plan.file, e.key, e.message + f" (content override: {', '.join(map(str, items))})")
    resolved = copy.deepcopy(plan.resolved)
    if resolved:
        measure = resolved.setdefault("measure", {})
        measure.pop("content", None)
        if checked:
            measure["content"] = list(checked)
        try:  # a target measure of a category no longer measured could never be met
            check_target_keys(measure)
        except s.Invalid as e:
            raise RecipeError(
                plan.file, e.key, e.message + f" (content override: {', '.join(checked) or 'none'})"
            )
    return dataclasses.replace(
        plan,
        measure=dataclasses.replace(plan.measure, content=checked),
        resolved=resolved,
        recipe_hash=recipe_hash(plan.recipe, dict(plan.variants), resolved) if resolved else plan.recipe_hash,
    )


def with_depth(plan: LanePlan, depth: int | str | Sequence[int | str]) -> LanePlan:
    """`plan` measuring these context depths ("0,8192" or a list; empty: none), with the rest of the recipe's
    `[measure.depth]` (else its defaults), checked as `measure.depth` is, against the engine's
    `--max-model-len` too; a RecipeError names the recipe file, the key and the override. docs/measurement.md,
    "Context depth"."""
    # papermill hands `-p depth 4096` over as an int, `-p depth 0,8192` as a string
    given = [depth] if isinstance(depth, int) else depth.split(",") if isinstance(depth, str) else list(depth)
    items: list[object] = [d.strip() if isinstance(d, str) else d for d in given]
    items = [int(d) if isinstance(d, str) and d.isdigit() else d for d in items if d != ""]
    shown = f" (depth override: {', '.join(map(str, items)) or 'none'})"
    resolved = copy.deepcopy(plan.resolved)
    measure = resolved.setdefault("measure", {})
    table = None
    if items:
        keys = {k: v for k, v in (measure.get("depth") or {}).items() if k != "tokens"}
        try:
            table = s.table(depth_fields())({**keys, "tokens": items}, "measure.depth")
            check_depth_window(table, context_window(resolved.get("engine", {}).get("args") or {}))
        except s.Invalid as e:
            raise RecipeError(plan.file, e.key, e.message + shown)
    measure.pop("depth", None)
    if table is not None:
        measure["depth"] = table
    return dataclasses.replace(
        plan,
        measure=dataclasses.replace(plan.measure, depth=depth_plan(table)),
        resolved=resolved,
        recipe_hash=recipe_hash(plan.recipe, dict(plan.variants), resolved)
        if plan.resolved
        else plan.recipe_hash,
    )
