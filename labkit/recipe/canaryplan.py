"""The slow-state canary of a measure plan (`[measure.canary]`): a fixed short decode before and after each run's
measurement, compared with the node set's healthy baseline (docs/measurement.md, "Slow-state canary").

Kept apart from measureplan.py so the canary reads as one idea: its keys, their defaults, its dataclass and its
line; it ends in its table.
"""

from __future__ import annotations

from dataclasses import dataclass

import labkit.recipe.schema as s
from labkit.recipe.measureplan import MeasurePlan, Rows, WorkloadTable


@dataclass(frozen=True)
class CanaryPlan:
    """`requests` greedy requests of one fixed prompt forcing `output_tokens` tokens, before and after the
    run's phases; a run whose canary is more than `slow` (a fraction) above the baseline is flagged."""

    requests: int = 3
    output_tokens: int = 64
    slow: float = 0.15


def canary_fields() -> dict[str, s.Field]:
    """[measure.canary]'s keys (all with defaults: an empty table turns the canary on)."""
    F = s.Field
    return {
        "requests": F(s.integer(1, 32), default=3),
        "output_tokens": F(s.integer(8, 4096), default=64),
        "slow": F(s.number(0.01), default=0.15),
    }


def canary_plan(table: dict) -> CanaryPlan:
    """The checked [measure.canary] table as a plan."""
    return CanaryPlan(table["requests"], table["output_tokens"], float(table["slow"]))


def _rows(c: CanaryPlan, m: MeasurePlan) -> Rows:
    return [
        (
            "canary",
            f"{c.requests} requests of {c.output_tokens} forced tokens before and after each run; "
            f"slow-canary above +{c.slow:.0%} of the lane's healthy baseline on its nodes",
        )
    ]


CANARY_TABLE = WorkloadTable[CanaryPlan](
    key="canary",
    field=lambda partial: s.Field(s.table(canary_fields(), partial=partial)),
    plan=canary_plan,
    rows=_rows,
)
