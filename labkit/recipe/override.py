"""Overrides of a resolved plan, checked as the recipe's own values are: `with_nodes` puts a lane on other
nodes (the notebook's `nodes` parameter, `labkit.lab.plan(nodes=...)`), `with_prefill` other prompt lengths,
`with_content` other prompt content categories, `with_depth` other context depths, `with_agentic` other
sessions and `with_load` other load levels (the notebook's parameters of the same names).

A plan is frozen, so an override returns a new one. Its `resolved` table and `recipe_hash` record the
override, so a run folder says which nodes ran; the lane id stays the recipe's and variant's.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence

import labkit.recipe.names as names
import labkit.recipe.schema as s
from labkit.errors import LabkitError, RecipeError
from labkit.measures import CONTENT
from labkit.recipe.build import recipe_hash
from labkit.recipe.depthplan import check_depth_window, context_window, depth_fields, depth_plan
from labkit.recipe.fields import prefill_fields
from labkit.recipe.loadplan import (
    LOAD_TABLE,
    PROFILES,
    SESSION_KEYS,
    SLO_TABLE,
    check_load,
    check_slo,
    load_fields,
    slo_fields,
)
from labkit.recipe.measureplan import MeasurePlan, PrefillPlan
from labkit.recipe.plan import LanePlan
from labkit.recipe.rules import check_target_keys, parallel_problem, world_size
from labkit.recipe.sessionplan import agentic_fields, agentic_plan, check_session_api


def with_nodes(plan: LanePlan, nodes: str | Sequence[str]) -> LanePlan:
    """`plan` on `nodes` ("dgx5,dgx6" or a list; the first is the head).

    Each name must be a host name or IP address, without duplicates, and the lane's parallelism must still
    fill nodes × `cluster.gpus_per_node` (tp·pp·dp = 4 is refused on three one-GPU nodes). Fabric addresses
    are kept for the nodes still in the lane; the others are detected at boot. A RecipeError names the
    recipe file, the key and the override.
    """
    items = _items(nodes)
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
    items = _items(content)
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
        measure=plan.measure.with_workload("content", checked),
        resolved=resolved,
        recipe_hash=recipe_hash(plan.recipe, dict(plan.variants), resolved) if resolved else plan.recipe_hash,
    )


def with_prefill(plan: LanePlan, prompt_tokens: int | str | Sequence[int | str]) -> LanePlan:
    """`plan` measuring prefill at these prompt lengths ("4096,12600" or a list; empty: no prefill window), with
    the recipe's `measure.prefill.repeats`, checked as `measure.prefill` is, with the target measures it
    leaves; a RecipeError names the recipe file, the key and the override. A quick look at a lane whose long
    prompts take minutes (docs/measurement.md, "Prefill and TTFT")."""
    items = _lengths(prompt_tokens)
    shown = f"prefill override: {', '.join(map(str, items)) or 'none'}"
    table = _measure_table(plan, "prefill", prefill_fields(), {"prompt_tokens": items}, shown)
    assert table is not None  # a change was given

    def targets() -> None:  # a target measure of a prompt length no longer measured could never be met
        if plan.resolved:
            check_target_keys({**plan.resolved.get("measure", {}), "prefill": table})

    prefill = PrefillPlan(tuple(table["prompt_tokens"]), table["repeats"])
    measure = dataclasses.replace(plan.measure, prefill=prefill)
    return _with_measure(plan, "prefill", table, measure, shown, targets)


def _items(given: str | Sequence[object]) -> list[object]:
    """The non-empty items of "a,b" or a list, strings stripped."""
    items = given.split(",") if isinstance(given, str) else list(given)
    stripped = [i.strip() if isinstance(i, str) else i for i in items]
    return [i for i in stripped if i != ""]


def _lengths(given: int | str | Sequence[int | str]) -> list[object]:
    """Token counts as papermill hands them over: `-p depth 4096` an int, `-p depth 0,8192` a string; digit
    strings become ints, anything else stays for the schema to name."""
    items = [given] if isinstance(given, int) else _items(given)
    return [int(i) if isinstance(i, str) and i.isdigit() else i for i in items]


def with_depth(plan: LanePlan, depth: int | str | Sequence[int | str]) -> LanePlan:
    """`plan` measuring these context depths ("0,8192" or a list; empty: none), with the rest of the recipe's
    `[measure.depth]` (else its defaults), checked as `measure.depth` is, against the engine's context window
    too (--max-model-len or --context-length); a RecipeError names the recipe file, the key and the override.
    docs/measurement.md, "Context depth"."""
    items = _lengths(depth)
    window = context_window((plan.resolved.get("engine") or {}).get("args") or {})
    table = _measure_table(
        plan, "depth", depth_fields(), {"tokens": items} if items else None, ", ".join(map(str, items))
    )

    def fits() -> None:
        check_depth_window(table, window)

    measure = plan.measure.with_workload("depth", depth_plan(table) if table is not None else None)
    return _with_measure(
        plan, "depth", table, measure, f"depth override: {', '.join(map(str, items)) or 'none'}", fits
    )


def with_agentic(plan: LanePlan, turns: int | str) -> LanePlan:
    """`plan` with agentic sessions of `turns` turns (an int or its digits; "" or 0: none), with the rest of the
    recipe's `[measure.agentic]` (else its defaults), checked as the table is (chat API included); a
    RecipeError names the recipe file, the key and the override. docs/measurement.md, "Agentic sessions"."""
    text = str(turns).strip()
    value: object = int(text) if text.isdigit() else text
    change = {"turns": value} if value not in ("", 0) else None
    table = _measure_table(plan, "agentic", agentic_fields(), change, text or "none")

    def chat_only() -> None:
        check_session_api({"agentic": table, "api": plan.measure.api})

    measure = plan.measure.with_workload("agentic", agentic_plan(table) if table is not None else None)
    return _with_measure(plan, "agentic", table, measure, f"agentic override: {text or 'none'}", chat_only)


RATE_MARK = "/s"  # a load level written "0.5/s" is a rate (requests/s); a bare count is a concurrency
SESSION_MARK = "s"  # ... "s8" is 8 agentic sessions at once
PROFILE_MARK = (
    ":"  # "capacity:1,2,4,8" or "sweep:1,32": a profile, then its levels; "capacity" alone: the recipe's
)
LEVEL_KINDS = ("concurrency", "rate", "sessions")
OPEN_ONLY = ("rate", "arrival", "burstiness", "max_concurrency")  # keys of an open loop only
SESSION_ONLY = ("sessions", *SESSION_KEYS)  # keys of session levels only
LOAD_REQUESTS_PER_STREAM = 4  # a load override's level length when the recipe gives none: 4 requests a stream
LOAD_MIN_REQUESTS = 16  # ... and at least this many a level


def load_levels(given: int | str | Sequence[int | str]) -> dict[str, object]:
    """[measure.load]'s change from a load parameter as papermill hands it over: "1,2,4,8" (closed-loop
    streams), "0.5/s,1/s" (open-loop requests/s), "s2,s8" (agentic sessions at once), each optionally after a
    profile ("capacity:1,2,4,8", "sweep:1,32"), or a profile alone ("capacity": the recipe's levels); empty: {}.
    Mixed kinds and unreadable items are left for the schema to name."""
    change: dict[str, object] = {}
    if isinstance(given, str):
        head, mark, rest = given.partition(PROFILE_MARK)
        if head.strip() in PROFILES:
            change["profile"], given = head.strip(), rest if mark else ""
        elif mark:
            raise s.Invalid("measure.load.profile", f"{head.strip()!r} is no profile ({', '.join(PROFILES)})")
    items = _items(given) if isinstance(given, str) and not given.strip().isdigit() else _lengths(given)
    kinds = [_level_kind(i) for i in items]
    if len(set(kinds)) > 1:
        raise s.Invalid(
            "measure.load",
            "levels are all concurrencies (1,2,4), all rates (0.5/s,1/s) or all sessions (s2,s8), not mixed",
        )
    if kinds:
        change[kinds[0]] = [_level_value(i) for i in items]
    return change


def _level_kind(item: object) -> str:
    if isinstance(item, str) and item.endswith(RATE_MARK):
        return "rate"
    if isinstance(item, str) and item.startswith(SESSION_MARK):
        return "sessions"
    return "concurrency"


def _level_value(item: object) -> object:
    """A level's number as the schema should see it (what it cannot read, left for it to name)."""
    if not isinstance(item, str):
        return item
    text = item.removesuffix(RATE_MARK).removeprefix(SESSION_MARK).strip()
    if item.endswith(RATE_MARK):
        try:
            return float(text)
        except ValueError:
            return text
    return int(text) if text.isdigit() else text


def with_load(plan: LanePlan, load: int | str | Sequence[int | str]) -> LanePlan:
    """`plan` measuring these load levels ("1,2,4,8": closed-loop streams; "0.5/s,2/s": open-loop requests per
    second; "" none), with the rest of the recipe's `[measure.load]` (the other kind of level's keys dropped), a
    level length of LOAD_REQUESTS_PER_STREAM requests a stream (at least LOAD_MIN_REQUESTS) when the recipe gives
    none, checked as the table is, against the engine's caps too; a RecipeError names the recipe file, the key
    and the override. docs/measurement.md, "Serving under load"."""
    shown = f"load override: {','.join(map(str, load)) if isinstance(load, list | tuple) else load}"
    try:
        change: dict | None = load_levels(load) or None
    except s.Invalid as e:
        raise RecipeError(plan.file, e.key, e.message + f" ({shown})")
    recipe, change = _load_change(dict((plan.resolved.get("measure") or {}).get("load") or {}), change)
    table = _measure_table(plan, "load", load_fields(), change, shown.split(": ", 1)[1], base=recipe)
    measure_tables = plan.resolved.get("measure") or {}
    args = (plan.resolved.get("engine") or {}).get("args") or {}

    def rule() -> None:
        if table is not None:
            check_load({"measure": {**measure_tables, "load": table}, "engine": {"args": args}})

    measure = plan.measure.with_workload("load", LOAD_TABLE.plan(table) if table is not None else None)
    return _with_measure(plan, "load", table, measure, shown, rule)


def _load_change(recipe: dict, change: dict | None) -> tuple[dict, dict | None]:
    """The recipe's [measure.load] without the other kinds of level's keys, and the change with a level length
    when neither gives one (LOAD_REQUESTS_PER_STREAM a stream, at least LOAD_MIN_REQUESTS); session levels
    last their sessions' turns."""
    if change is None:
        return recipe, None
    kind = next((k for k in LEVEL_KINDS if k in change), None)
    if kind is not None:
        drop = {
            "concurrency": ("rate", "max_concurrency", *SESSION_ONLY),
            "rate": ("concurrency", *SESSION_ONLY),
            "sessions": ("concurrency", *OPEN_ONLY, "duration_s", "requests", "shared_prefix_tokens"),
        }[kind]
        recipe = {k: v for k, v in recipe.items() if k not in drop}
    if "sessions" in change or recipe.get("sessions"):
        return recipe, change
    if recipe.get("duration_s") is None and recipe.get("requests") is None and "requests" not in change:
        levels = change.get("concurrency") or recipe.get("concurrency") or []
        widest = max((v for v in levels if isinstance(v, int)), default=1)
        change = {**change, "requests": max(LOAD_MIN_REQUESTS, LOAD_REQUESTS_PER_STREAM * widest)}
    return recipe, change


def endpoint_load(
    measure: MeasurePlan, load: str, requests: int | None = None, slo: str | None = None
) -> MeasurePlan:
    """`measure` with load levels for an endpoint no recipe describes (`labkit bench URL --load 1,2,4`): the
    levels as `with_load` reads them, `requests` per level (else its default), and an SLO written
    "ttft_s=1.5,tpot_s=0.015[,percentile=99]"; checked as a recipe's tables are (no engine caps are known),
    a LabkitError naming the option and the key."""
    change = load_levels_checked(load, "--load")
    if change is None:
        return measure.with_workload("load", None).with_workload("slo", None)
    if requests is not None:
        change["requests"] = requests
    _, change = _load_change({}, change)
    tables: dict = {"timeout": measure.timeout}
    try:
        tables["load"] = s.table(load_fields())(change, "measure.load")
        if slo:
            tables["slo"] = s.table(slo_fields())(_pairs(slo), "measure.slo")
        check_load({"measure": tables, "engine": {"args": {}}})
        check_slo({"measure": tables})
    except s.Invalid as e:
        raise LabkitError(f"--load/--slo: {e.key}: {e.message}")
    out = measure.with_workload("load", LOAD_TABLE.plan(tables["load"]))
    return out.with_workload("slo", SLO_TABLE.plan(tables["slo"]) if slo else None)


def load_levels_checked(load: str, option: str) -> dict | None:
    """load_levels for a command-line option: None for "" (no levels), a LabkitError naming the option."""
    try:
        return load_levels(load) or None
    except s.Invalid as e:
        raise LabkitError(f"{option}: {e.key}: {e.message}")


def _pairs(text: str) -> dict[str, object]:
    """ "ttft_s=1.5,tpot_s=0.015" as a table; numbers as floats, anything else left for the schema to name."""
    out: dict[str, object] = {}
    for item in _items(text):
        key, eq, value = str(item).partition("=")
        if not eq:
            raise s.Invalid("measure.slo", f"expected key=value pairs like ttft_s=1.5, got {item!r}")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            out[key.strip()] = value.strip()
    return out


def _measure_table(
    plan: LanePlan,
    key: str,
    fields: dict[str, s.Field],
    change: dict | None,
    shown: str,
    base: dict | None = None,
) -> dict | None:
    """The recipe's `[measure.<key>]` (or `base` in its place) with `change` over it, checked; None when
    `change` is None (no table)."""
    if change is None:
        return None
    table = (plan.resolved.get("measure") or {}).get(key) or {} if base is None else base
    kept = {k: v for k, v in table.items() if k not in change}
    try:
        return s.table(fields)({**kept, **change}, f"measure.{key}")
    except s.Invalid as e:
        raise RecipeError(plan.file, e.key, e.message + f" ({key} override: {shown})")


def _with_measure(
    plan: LanePlan, key: str, table: dict | None, measure: MeasurePlan, shown: str, check: Callable[[], None]
) -> LanePlan:
    """`plan` whose `[measure.<key>]` is `table` (None: left out) and whose MeasurePlan is `measure`, after
    `check` (a cross-key rule, raising schema.Invalid); its resolved table and recipe hash follow."""
    try:
        check()
    except s.Invalid as e:
        raise RecipeError(plan.file, e.key, e.message + f" ({shown})")
    resolved = copy.deepcopy(plan.resolved)
    tables = resolved.setdefault("measure", {})
    tables.pop(key, None)
    if table is not None:
        tables[key] = table
    return dataclasses.replace(
        plan,
        measure=measure,
        resolved=resolved,
        recipe_hash=recipe_hash(plan.recipe, dict(plan.variants), resolved)
        if plan.resolved
        else plan.recipe_hash,
    )
