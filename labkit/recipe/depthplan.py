"""The context-depth part of a measure plan (`[measure.depth]`), as recipe fields and as the frozen plan the
measure step reads (docs/measurement.md, "Context depth").

Kept apart from measureplan.py so the depth workload reads as one idea: its keys, their defaults, the refusal
of a depth the lane's context window cannot hold, the dataclass they become and its lines; it ends in its table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import labkit.recipe.schema as s
from labkit.measures import (
    CACHE_STATES,  # how the context is found: computed afresh (uncached), or sent before
    CacheState,
    depth_key,
)
from labkit.recipe.measureplan import MeasurePlan, Rows, WorkloadTable, int_flag

MAX_DEPTH = 1_048_576  # tokens: far beyond any lane's window, a typo guard


@dataclass(frozen=True)
class DepthPlan:
    """Per depth D (tokens of context before the question): requests whose context is uncached (a fresh one)
    and/or cached (loaded by a request before), each asking a question of about `prompt_tokens` tokens and
    forcing `output_tokens` answer tokens; `repeats` of each per repetition."""

    tokens: tuple[int, ...]
    cache: tuple[CacheState, ...] = CACHE_STATES
    prompt_tokens: int = 128
    output_tokens: int = 64
    repeats: int = 1

    def requests(self) -> int:
        """Requests of one repetition: a cached measurement also sends its load request; depth 0 has no
        context to cache, so only the uncached one."""
        per = 0
        for depth in self.tokens:
            per += ("uncached" in self.cache) + (2 if depth and "cached" in self.cache else 0)
        return per * self.repeats

    def states(self, depth: int) -> tuple[CacheState, ...]:
        """The cache states measured at `depth`, in plan order (depth 0 has only the uncached one)."""
        return tuple(c for c in self.cache if depth or c == "uncached")


def depth_fields() -> dict[str, s.Field]:
    """[measure.depth]'s keys; `tokens` is required (an empty table would measure nothing)."""
    F = s.Field
    return {
        "tokens": F(s.array(s.integer(0, MAX_DEPTH), nonempty=True, unique=True), required=True),
        "cache": F(s.array(s.choice(*CACHE_STATES), nonempty=True, unique=True), default=list(CACHE_STATES)),
        "prompt_tokens": F(s.integer(8, 65536), default=128),  # the question after the context, about
        "output_tokens": F(s.integer(2, 65536), default=64),  # the answer, forced length
        "repeats": F(s.integer(1, 16), default=1),
    }


def depth_plan(table: dict) -> DepthPlan:
    """The checked [measure.depth] table as a plan."""
    return DepthPlan(
        tuple(table["tokens"]),
        tuple(table["cache"]),
        table["prompt_tokens"],
        table["output_tokens"],
        table["repeats"],
    )


# the engine flags that set its context window: vLLM's (and the simulator's), SGLang's
WINDOW_FLAGS = ("--max-model-len", "--context-length")


def context_window(engine_args: Mapping[str, Any]) -> tuple[str, int] | None:
    """(flag, tokens) of the lane's context window as the recipe sets it (WINDOW_FLAGS), None when it sets none:
    an SGLang lane says --context-length, a vLLM lane --max-model-len."""
    return int_flag(engine_args, WINDOW_FLAGS)


def check_depth_window(depth: dict | None, window: tuple[str, int] | None) -> None:
    """Refuse a depth whose context, question and answer cannot fit the lane's context window (the engine's
    --max-model-len or --context-length, when the recipe sets it): the engine would refuse the requests after
    the boot."""
    if depth is None or window is None:
        return
    flag, limit = window
    for i, tokens in enumerate(depth["tokens"]):
        need = tokens + depth["prompt_tokens"] + depth["output_tokens"]
        if need > limit:
            raise s.Invalid(
                f"measure.depth.tokens[{i}]",
                f"{tokens:,} tokens of context + {depth['prompt_tokens']} of question + "
                f"{depth['output_tokens']} of answer = {need:,}, over the context window of {limit:,} "
                f"(engine.args {flag})",
            )


def _rows(d: DepthPlan, m: MeasurePlan) -> Rows:
    depths = ", ".join(f"{n:,}" for n in d.tokens)
    return [
        (
            "depth",
            f"{depths} tokens of context, {' and '.join(d.cache)} x {d.repeats}, "
            f"~{d.prompt_tokens}-token questions, {d.output_tokens}-token answers",
        )
    ]


def _targets(table: dict[str, list]) -> set[str]:
    """The per-depth measures (labkit/measure/summary/depth.py)."""
    out: set[str] = set()
    for tokens in table["tokens"]:
        for state in table["cache"]:
            if tokens or state == "uncached":
                out |= {depth_key(m, tokens, state) for m in ("ttft", "prefill", "decode")}
    return out


DEPTH_TABLE = WorkloadTable[DepthPlan](
    key="depth",
    field=lambda partial: s.Field(s.table(depth_fields(), partial=partial)),
    plan=depth_plan,
    rows=_rows,
    rule=lambda merged: check_depth_window(
        merged["measure"].get("depth"), context_window(merged["engine"]["args"])
    ),
    targets=_targets,
)
