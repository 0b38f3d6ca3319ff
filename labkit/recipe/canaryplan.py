"""The slow-state canary of a measure plan (`[measure.canary]`): a fixed short decode before and after each run's
measurement, compared with the node set's healthy baseline (docs/measurement.md, "Slow-state canary").

Kept apart from measureplan.py so the canary reads as one idea: its keys, their defaults and its dataclass.
"""

from __future__ import annotations

from dataclasses import dataclass

import labkit.recipe.schema as s


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


def canary_plan(table: dict | None) -> CanaryPlan | None:
    """The checked [measure.canary] table as a plan; None when the recipe has none (no canary)."""
    if table is None:
        return None
    return CanaryPlan(table["requests"], table["output_tokens"], float(table["slow"]))
