"""The prompt-content part of a measure plan (`measure.content`): the corpus categories measured c1 after the
decode phase, as a recipe field and as the tuple the content workload reads (docs/measurement.md, "Prompt
content").

Kept apart from measureplan.py so each optional workload's recipe half is one module ending in its table.
"""

from __future__ import annotations

import labkit.recipe.schema as s
from labkit.measures import CONTENT, content_key
from labkit.recipe.measureplan import PER_RUN_MEASURES, MeasurePlan, Rows, WorkloadTable

# what the content phase writes per category (labkit/measure/summary/content.py): decode_c1 and the per-run
# figures but the prefix-cache ratio
CONTENT_MEASURES = ("decode_c1", *sorted(PER_RUN_MEASURES - {"prefix_cache_hit_ratio"}))


def content_field(partial: bool = False) -> s.Field:
    """`measure.content`: categories of the pinned corpus (absent: none, only the default synthetic prose)."""
    return s.Field(s.array(s.choice(*CONTENT), unique=True))


def _rows(content: tuple[str, ...], m: MeasurePlan) -> Rows:
    return [("content", f"c1 on corpus prompts: {', '.join(content)}, {m.decode.turns} turns each")]


def _targets(content: list[str]) -> set[str]:
    return {content_key(m, c) for c in content for m in CONTENT_MEASURES}


CONTENT_TABLE = WorkloadTable[tuple[str, ...]](
    key="content", field=content_field, plan=tuple, rows=_rows, targets=_targets, unset=()
)
