"""Tables with a row per lane and one more axis (prompt content, session turn, ...): a column per row spec, each
row spec read for the axis value of its row. The content and turn tables differ only in which axis values a
lane has and how a row spec reads one of them; this builds the table from those two functions.

Pure: the long-form measures frame in, a finished Table out, rendered like every table. Lanes are picked as for
a lane table (tables.lane_groups); a lane with no axis value has no rows. Cells are tables.cell's and carry the
† marks of the flags whose window covers the measure a cell shows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from labkit.report.format import MISSING
from labkit.report.intervals import interval_note
from labkit.report.specs import RowSpec, TableSpec
from labkit.report.stats import unit_of
from labkit.report.tables import (
    LaneColumn,
    RunFlags,
    Table,
    cell,
    flag_note,
    lane_groups,
    mark_cell,
    run_flags,
)


def axis_table(
    spec: TableSpec,
    measures: Any,
    boots: Mapping[str, str | None] | None,
    flags: RunFlags | None,
    *,
    axis: str,
    values_of: Callable[[Any], list[str]],
    read_as: Callable[[RowSpec, str], RowSpec],
) -> Table:
    """The table of one spec with rows (lane, value) for each value `values_of(lane's measures)` gives, in that
    order, and `read_as(row, value)` the row spec as it reads that value's figure; `axis` names the index
    level. `boots` and `flags` as for tables.build_table (interval unit, † marks and their notes)."""
    import pandas as pd

    keys: list[tuple[str, str]] = []
    grid: list[list[str]] = []
    lanes: list[LaneColumn] = []
    notes: list[str] = []
    forms = {spec.interval_of(row) for row in spec.rows} - {"range"}
    for lane, part in lane_groups(measures, spec):
        found = values_of(part)
        if not found:
            continue
        runs = sorted(part["run"].unique())
        lane.unit = unit_of(runs, boots)
        pairs = run_flags(runs, flags)
        used: set[int] = set()
        for value in found:
            values = []
            for row in spec.rows:
                shown = read_as(row, value)
                values.append(mark_cell(cell(shown, part, lane, spec.interval_of(row)), shown, pairs, used))
            keys.append((lane.title, value))
            grid.append(values)
        lanes.append(lane)
        notes += [flag_note(lane, *pairs[i]) for i in sorted(used)]
    keep = [
        i
        for i in range(len(spec.rows))
        if not spec.drop_empty_rows or any(values[i] != MISSING for values in grid)
    ]
    index = pd.MultiIndex.from_tuples(keys, names=["lane", axis]) if keys else pd.Index([], name="lane")
    frame = pd.DataFrame(
        [[values[i] for i in keep] for values in grid],
        index=index,
        columns=[spec.rows[i].label for i in keep],
        dtype=object,
    )
    shown_forms = {spec.interval_of(spec.rows[i]) for i in keep} & forms
    notes = list(spec.notes) + ([interval_note(lanes, shown_forms)] if shown_forms and lanes else []) + notes
    return Table(id=spec.id, title=spec.title, frame=frame, lanes=lanes, notes=notes, empty=spec.empty)
