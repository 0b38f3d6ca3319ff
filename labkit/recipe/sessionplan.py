"""The agentic part of a measure plan: multi-turn sessions (`[measure.agentic]`) and idle turns
(`measure.idle_s`), as recipe fields and as the frozen plan the measure step reads (docs/measurement.md,
"Agentic sessions" and "Idle turns").

Kept apart from measureplan.py so the session workload reads as one idea: its keys, their defaults, the
dataclass they become, its rule and its lines; it ends in the two workloads' tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import labkit.recipe.schema as s
from labkit.measures import idle_key, turn_key
from labkit.recipe.measureplan import MeasurePlan, Rows, WorkloadTable

SESSIONS_AT_ONCE = (1, 2)  # sessions sent together, turn by turn


@dataclass(frozen=True)
class AgenticPlan:
    """Sessions of `turns` turns; each turn after the first appends the previous answer and a tool result of
    about `tool_tokens` tokens, and asks for an answer of `answer_tokens` forced tokens; `sessions` run at
    once (lockstep, turn by turn); `repeats` sessions (or session pairs) one after the other per repetition."""

    turns: int
    tool_tokens: int
    answer_tokens: int
    sessions: int = 1
    repeats: int = 1

    def requests(self) -> int:
        """Requests of one repetition: every turn of every session."""
        return self.turns * self.sessions * self.repeats


def agentic_fields() -> dict[str, s.Field]:
    """[measure.agentic]'s keys (all with defaults: an empty table is a valid workload)."""
    F = s.Field
    return {
        "turns": F(s.integer(2, 64), default=3),  # turn 1 opens the session; later turns hit its prefix
        "tool_tokens": F(s.integer(16), default=512),  # about this many tokens of tool result per turn
        "answer_tokens": F(s.integer(2), default=32),  # the short answer, forced length
        "sessions": F(_sessions, default=1),
        "repeats": F(s.integer(1, 16), default=1),
    }


def _sessions(value: Any, path: str) -> int:
    n = s.integer(1)(value, path)
    if n not in SESSIONS_AT_ONCE:
        raise s.Invalid(
            path, f"sessions at once must be one of {', '.join(map(str, SESSIONS_AT_ONCE))}, got {n}"
        )
    return n


def idle_field(partial: bool = False) -> s.Field:
    """`measure.idle_s`: seconds of idle engine before each idle turn (absent: no idle turns)."""
    return s.Field(s.array(s.integer(1, 3600), unique=True))


def agentic_plan(table: dict) -> AgenticPlan:
    """The checked [measure.agentic] table as a plan."""
    return AgenticPlan(
        table["turns"], table["tool_tokens"], table["answer_tokens"], table["sessions"], table["repeats"]
    )


def check_session_api(measure: dict) -> None:
    """Agentic sessions are chat conversations: a plan with them needs the chat API."""
    if measure.get("agentic") is not None and measure["api"] != "chat":
        raise s.Invalid(
            "measure.agentic", 'agentic sessions are chat conversations: they need measure.api = "chat"'
        )


def _agentic_rows(a: AgenticPlan, m: MeasurePlan) -> Rows:
    at_once = "1 session" if a.sessions == 1 else f"{a.sessions} sessions at once"
    return [
        (
            "agentic",
            f"{at_once} x {a.repeats}, {a.turns} turns, ~{a.tool_tokens}-token tool results, "
            f"{a.answer_tokens}-token answers",
        )
    ]


def _turn_targets(table: dict[str, int]) -> set[str]:
    """The per-turn measures (labkit/measure/summary/turns.py)."""
    return {turn_key(m, turn) for turn in range(1, table["turns"] + 1) for m in ("ttft", "prefill", "decode")}


def _idle_rows(idle_s: tuple[int, ...], m: MeasurePlan) -> Rows:
    return [("idle", f"one request after {', '.join(map(str, idle_s))} s of idle engine")]


def _idle_targets(seconds: list[int]) -> set[str]:
    return {idle_key(m, s) for s in seconds for m in ("ttft", "decode")}


AGENTIC_TABLE = WorkloadTable[AgenticPlan](
    key="agentic",
    field=lambda partial: s.Field(s.table(agentic_fields(), partial=partial)),
    plan=agentic_plan,
    rows=_agentic_rows,
    rule=lambda merged: check_session_api(merged["measure"]),
    targets=_turn_targets,
)
IDLE_TABLE = WorkloadTable[tuple[int, ...]](
    key="idle_s", field=idle_field, plan=tuple, rows=_idle_rows, targets=_idle_targets, unset=()
)
