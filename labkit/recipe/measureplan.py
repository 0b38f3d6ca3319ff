"""What a lane measures: the decode and prefill shapes, the repetitions, the measures a target CI covers, and
the optional workloads' plans by their [measure] key.

`WorkloadTable` is the recipe half of an optional workload (prompt content, sessions, idle turns, depths, the
canary, or one a test defines): its [measure] key, its schema field, how its checked value becomes the plan
object its workload reads, its cross-key rule, the target measures it makes and its `labkit show` lines. The
tables are registered in `labkit/recipe/workloads.py`, which the schema, the build, the rules and the
description read, so the recipe package names no optional workload by hand (docs/architecture.md, "How to add
a workload"). Kept here beside `MeasurePlan` because a table's `of` reads the plan and its rows describe it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast

import labkit.recipe.schema as s
from labkit.measures import content_key, decode_key, headline, prefill_key

if TYPE_CHECKING:  # annotations only: those modules define their WorkloadTable with this module's type
    from labkit.recipe.canaryplan import CanaryPlan
    from labkit.recipe.depthplan import DepthPlan
    from labkit.recipe.sessionplan import AgenticPlan

Api = Literal["chat", "completions"]  # the OpenAI endpoint a lane's requests go to (measure.api)
TARGET_MAX_RUNS = 10  # measure.max_runs when target_ci is set without it
# the measures every run makes once, whatever its plan; measure.target_measures may name them
PER_RUN_MEASURES = frozenset(
    {"ttft_c1", "accept_length", "accept_rate", "accept_per_draft", "prefix_cache_hit_ratio"}
)


def int_flag(engine_args: Mapping[str, Any], flags: tuple[str, ...]) -> tuple[str, int] | None:
    """(flag, value) of the first of `flags` the recipe's engine args set to an integer (a flag also spelled
    with underscores, a value also as digits), None when none is set."""
    for flag, value in engine_args.items():
        if "--" + flag.lstrip("-").replace("_", "-") not in flags:
            continue
        if isinstance(value, str) and value.isdigit():
            return flag, int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            return flag, value
    return None


@dataclass(frozen=True)
class DecodePlan:
    concurrency: tuple[int, ...]
    turns: int
    output_tokens: int
    warmup: int


@dataclass(frozen=True)
class PrefillPlan:
    prompt_tokens: tuple[int, ...]
    repeats: int


@dataclass(frozen=True)
class MeasurePlan:
    api: Api
    runs: int
    decode: DecodePlan
    prefill: PrefillPlan
    timeout: float
    target_ci: float | None = None  # relative half-width of the 95 % interval to repeat until
    max_runs: int | None = None  # cap on repetitions when target_ci is set
    target_measures: tuple[str, ...] = ()  # the measures target_ci applies to; () = the headline ones
    seed: int | None = None  # shared prompt seed: repetition i draws its prompt texts from "<seed>/<i>"
    telemetry_period: float = 1.0  # seconds between node telemetry samples; 0 = none (docs/measurement.md)
    clock_drop: float = 0.10  # a window's SM clock this fraction below the node's baseline is flagged
    # the optional workloads the recipe asks for, by [measure] key: each value is what its WorkloadTable's `plan`
    # made of the checked table; a key is absent when unset (labkit/recipe/workloads.py)
    workloads: Mapping[str, object] = field(default_factory=dict)

    def with_workload(self, key: str, value: object) -> MeasurePlan:
        """This plan with workload `key` set to `value`, or left out when `value` is None or empty."""
        rest = {k: v for k, v in self.workloads.items() if k != key}
        return replace(self, workloads={**rest, key: value} if value else rest)

    # typed reads of the existing workloads' plans, kept for the callers that read them as fields; a workload
    # added later reads its plan with its own table's `of`
    @property
    def content(self) -> tuple[str, ...]:
        """Content categories measured after the decode phase (c1 on the pinned corpus); () = only the default
        synthetic prose (docs/measurement.md, "Prompt content")."""
        return cast(tuple[str, ...], self.workloads.get("content", ()))  # contentplan's table files a tuple

    @property
    def agentic(self) -> AgenticPlan | None:
        """Multi-turn sessions after the content phase (labkit/recipe/sessionplan.py)."""
        return cast("AgenticPlan | None", self.workloads.get("agentic"))  # sessionplan's table files one

    @property
    def idle_s(self) -> tuple[int, ...]:
        """Idle lengths in seconds, one idle turn each (labkit/recipe/sessionplan.py)."""
        return cast(tuple[int, ...], self.workloads.get("idle_s", ()))  # sessionplan's table files a tuple

    @property
    def depth(self) -> DepthPlan | None:
        """Decode and prefill at context depths, cached and uncached (labkit/recipe/depthplan.py)."""
        return cast("DepthPlan | None", self.workloads.get("depth"))  # depthplan's table files one

    @property
    def canary(self) -> CanaryPlan | None:
        """A fixed short decode before and after the phases (labkit/recipe/canaryplan.py)."""
        return cast("CanaryPlan | None", self.workloads.get("canary"))  # canaryplan's table files one

    def headline_measures(self) -> tuple[str, ...]:
        """The catalogue's headline rates this plan measures: decode_c1 and decode_c<K>_agg, prefill_<P> (each
        in plan order), then decode_c1@<category> per content category, as the catalogue orders them
        (docs/measurement.md, "The measure catalogue")."""
        decode = [decode_key(k) for k in self.decode.concurrency] if self.decode.turns >= 1 else []
        content = [content_key("decode_c1", c) for c in self.content] if self.decode.turns >= 1 else []
        prefill = [prefill_key(p) for p in self.prefill.prompt_tokens]
        return tuple(headline(decode + prefill + content, rates_only=True))

    def ci_measures(self) -> tuple[str, ...]:
        """The measures `target_ci` is checked on."""
        return self.target_measures or self.headline_measures()

    def ci_run_cap(self) -> int:
        """How many repetitions at most: `runs` without target_ci, else max_runs (default TARGET_MAX_RUNS)."""
        if self.target_ci is None:
            return self.runs
        return self.max_runs if self.max_runs is not None else max(self.runs, TARGET_MAX_RUNS)


T = TypeVar("T")
Rows = list[tuple[str, str]]


def _no_rule(merged: dict[str, Any]) -> None:
    """A workload table without a cross-key rule."""


def _no_targets(value: object) -> set[str]:
    """A workload whose measures target_ci may not name."""
    return set()


@dataclass(frozen=True)
class WorkloadTable(Generic[T]):
    """The recipe half of an optional workload, `measure.<key>`. Unset (absent, or empty) means absent from the
    resolved recipe, from its hash and from the plan, so a recipe written before the workload keeps its hash.

    `field(partial)`: its schema field (`partial` for a variant overlay: no defaults, no required keys), whose
    checker names the key of a bad value (the loader adds the file). `plan(value)`: the checked, set value as
    the plan object its workload reads (`of`). `rows(plan, m)`: its `labkit show` lines. `rule(merged)`: a
    cross-key check on the whole merged recipe, raising schema.Invalid. `targets(value)`: the measure keys it
    produces that `measure.target_measures` may name. `unset`: what the run record's plan holds without it
    (None, or () for an array), as run.json always held."""

    key: str
    field: Callable[[bool], s.Field]
    plan: Callable[[Any], T]
    rows: Callable[[T, MeasurePlan], Rows]
    rule: Callable[[dict], None] = _no_rule
    targets: Callable[[Any], set[str]] = _no_targets
    unset: object = None

    def of(self, m: MeasurePlan) -> T | None:
        """Its plan object in `m`, None when the plan does not ask for it."""
        return cast("T | None", m.workloads.get(self.key))  # only this table's `plan` files under its key
