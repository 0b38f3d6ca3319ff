"""The table "decode c1 and acceptance by prompt content": a row per lane and content, first the lane's
default content (`synthetic`: its un-suffixed figures), then each category it measured; a column per row spec,
each taken with the category's `@<category>` suffix (docs/measurement.md, "Prompt content").

Pure: the long-form measures frame in, a finished Table out, rendered like every table (tables.to_markdown,
text.to_text). Lanes are picked as for a lane table (tables.lane_groups); a lane without content measures has
no rows. Cells are tables.cell's (ranges, or a 95 % interval from at least 3 runs) and carry the † marks of
the flags whose window covers them (a decode@code flag marks the code row only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from labkit.measures import CONTENT, content_key, split_content
from labkit.report.format import MISSING
from labkit.report.intervals import interval_note
from labkit.report.specs import RowSpec, TableSpec
from labkit.report.stats import unit_of
from labkit.report.tables import (
    DEFAULT_MEASURES,
    LaneColumn,
    Table,
    cell,
    flag_note,
    lane_groups,
    mark_cell,
    run_flags,
)

DEFAULT_CONTENT = "synthetic"  # the row of a lane's un-suffixed figures: the decode phase's synthetic prose


def categories(part: Any) -> list[str]:
    """The content categories a lane's rows hold measures of, in catalogue order."""
    found = {split_content(str(m))[1] for m in part["measure"].unique()} if len(part) else set()
    return [c for c in CONTENT if c in found]


def for_content(row: RowSpec, content: str) -> RowSpec:
    """The row spec as it reads one content's figures: its measure with the category's suffix; the default
    content keeps it as it is (and its cold figure, which only the decode phase has)."""
    if content == DEFAULT_CONTENT or row.format in ("runs", "kv", "nfs"):
        return row
    measure = row.measure or DEFAULT_MEASURES.get(row.format, "")
    return dataclasses.replace(row, measure=content_key(measure, content), cold="")


def content_table(
    spec: TableSpec,
    measures: Any,
    boots: Mapping[str, str | None] | None = None,
    flags: Mapping[str, list[dict] | None] | None = None,
) -> Table:
    """The content table of one spec; `boots` and `flags` as for tables.build_table (interval unit, †
    marks and their notes)."""
    import pandas as pd

    keys: list[tuple[str, str]] = []
    grid: list[list[str]] = []
    lanes: list[LaneColumn] = []
    notes: list[str] = []
    forms = {spec.interval_of(row) for row in spec.rows} - {"range"}
    for lane, part in lane_groups(measures, spec):
        found = categories(part)
        if not found:
            continue
        runs = sorted(part["run"].unique())
        lane.unit = unit_of(runs, boots)
        pairs = run_flags(runs, flags)
        used: set[int] = set()
        for content in (DEFAULT_CONTENT, *found):
            values = []
            for row in spec.rows:
                shown = for_content(row, content)
                values.append(mark_cell(cell(shown, part, lane, spec.interval_of(row)), shown, pairs, used))
            keys.append((lane.title, content))
            grid.append(values)
        lanes.append(lane)
        notes += [flag_note(lane, *pairs[i]) for i in sorted(used)]
    keep = [
        i
        for i in range(len(spec.rows))
        if not spec.drop_empty_rows or any(values[i] != MISSING for values in grid)
    ]
    index = pd.MultiIndex.from_tuples(keys, names=["lane", "content"]) if keys else pd.Index([], name="lane")
    frame = pd.DataFrame(
        [[values[i] for i in keep] for values in grid],
        index=index,
        columns=[spec.rows[i].label for i in keep],
        dtype=object,
    )
    shown_forms = {spec.interval_of(spec.rows[i]) for i in keep} & forms
    notes = list(spec.notes) + ([interval_note(lanes, shown_forms)] if shown_forms and lanes else []) + notes
    return Table(id=spec.id, title=spec.title, frame=frame, lanes=lanes, notes=notes, empty=spec.empty)
