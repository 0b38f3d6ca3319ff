"""Tables with a row per lane and one more axis of the measure keys, the axis declared in results/tables.toml
(`axis = "content"`, `"turn"` or `"depth"`): a column per row spec, each row spec read for the axis value of
its row. The axes differ only in which rows a lane has and which key a row spec reads on each; both come from
the keys themselves (labkit.measures), so no axis parses a key here.

- content: the lane's default content (`synthetic`: its un-suffixed figures, its cold figure too), then each
  category it measured in CONTENT order, read with the category's `@<category>` (docs/measurement.md,
  "Prompt content"); a decode@code flag marks the code row only.
- turn: a row per agentic session turn, then per idle length, a row spec's measure naming a turn's figure
  (`ttft`, `hit`, ...) read as `agentic_<m>_t<T>` or `idle_<S>_<m>` ("Agentic sessions", "Idle turns").
- depth: a row per context depth and cache state, uncached first, read as `depth_<D>_<m>[_cached]`; a figure
  of the depth itself (`ttft_gain`) on its cached row ("Context depth").

Pure: the long-form measures frame in, a finished Table out, rendered like every table. Lanes are picked as for
a lane table (tables.lane_groups); a lane with no axis value has no rows. Cells are tables.cell's and carry the
† marks of the flags whose window covers the measure a cell shows.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from labkit.measures import (
    AXIS,
    CACHE_STATES,
    CONTENT,
    MeasureKey,
    content_key,
    depth_key,
    idle_key,
    level_key,
    level_label,
    level_values,
    parse_key,
    turn_key,
)
from labkit.report.format import MISSING
from labkit.report.intervals import interval_note
from labkit.report.specs import RowSpec, TableSpec
from labkit.report.stats import unit_of
from labkit.report.tables import (
    DEFAULT_MEASURES,
    LaneColumn,
    RunFlags,
    Table,
    cell,
    flag_note,
    lane_groups,
    mark_cell,
    run_flags,
)

DEFAULT_CONTENT = "synthetic"  # the row of a lane's un-suffixed figures: the decode phase's synthetic prose
NOT_PER_CONTENT = ("runs", "kv", "nfs")  # row formats of the lane, not of a content: shown as they are


@dataclass(frozen=True)
class AxisRow:
    """One row of a lane: its label (the index value, "turn 2") and the row spec as it reads that row."""

    label: str
    read: Callable[[RowSpec], RowSpec]


def _keys(part: Any) -> list[MeasureKey]:
    """The catalogue keys among a lane's measures, parsed."""
    found = (parse_key(str(m)) for m in part["measure"].unique()) if len(part) else iter(())
    return [k for k in found if k is not None]


def _reading(row: RowSpec, build: Callable[..., str], *args: Any, **axes: Any) -> RowSpec:
    """The row spec reading the key `build(row.measure, *args, **axes)`; no figure when no such family exists
    (an `energy` column on a turn row, a `slowdown` of a session turn)."""
    try:
        measure = build(row.measure, *args, **axes)
    except ValueError:
        measure = ""
    return dataclasses.replace(row, measure=measure, cold="")


def content_rows(part: Any) -> list[AxisRow]:
    """The default content, then each category the lane's keys hold, in CONTENT order; none without any."""
    found = {k.get("content") for k in _keys(part)}
    categories = [c for c in CONTENT if c in found]
    if not categories:
        return []
    return [AxisRow(DEFAULT_CONTENT, lambda row: row)] + [
        AxisRow(c, partial(_on_content, category=c)) for c in categories
    ]


def _on_content(row: RowSpec, category: str) -> RowSpec:
    if row.format in NOT_PER_CONTENT:
        return row
    row = dataclasses.replace(row, measure=row.measure or DEFAULT_MEASURES.get(row.format, ""))
    return _reading(row, content_key, category)


def turn_rows(part: Any) -> list[AxisRow]:
    """A row per session turn measured ("turn <T>"), then per idle length ("idle <S> s")."""
    keys = _keys(part)
    turns = sorted({t for k in keys if isinstance(t := k.get("turn"), int)})
    idles = sorted({s for k in keys if isinstance(s := k.get("idle"), int | float)})
    return [AxisRow(f"turn {t}", partial(_reading, build=turn_key, turn=t)) for t in turns] + [
        AxisRow(f"idle {AXIS['idle'].text_of(s)} s", partial(_reading, build=idle_key, seconds=s))
        for s in idles
    ]


def depth_rows(part: Any) -> list[AxisRow]:
    """A row per depth and cache state measured ("<D> uncached", "<D> cached"), by depth, uncached first."""
    found = {(k.get("depth"), k.get("cache")) for k in _keys(part) if k.get("cache") is not None}
    pairs = sorted(
        ((d, str(c)) for d, c in found if isinstance(d, int)), key=lambda p: (p[0], CACHE_STATES.index(p[1]))
    )
    return [AxisRow(f"{d} {c}", partial(_at_depth, depth=d, state=c)) for d, c in pairs]


def _at_depth(row: RowSpec, depth: int, state: str) -> RowSpec:
    try:  # a figure of the depth itself, of no one cache state: on the cached row
        whole = depth_key(row.measure, depth)
    except ValueError:
        return _reading(row, depth_key, depth, state)
    return dataclasses.replace(row, measure=whole if state == "cached" else "", cold="")


def load_rows(part: Any) -> list[AxisRow]:
    """A row per load level measured: closed-loop levels ("c4") by concurrency, then rates ("0.5/s")."""
    keys = [str(m) for m in part["measure"].unique()] if len(part) else []
    return [
        AxisRow(level_label(axis, v), partial(_reading, build=level_key, axis=axis, value=v))
        for axis, v in level_values(keys)
    ]


# the rows of each axis a table may declare (specs.AXES names them for tables.toml)
AXIS_ROWS: Mapping[str, Callable[[Any], list[AxisRow]]] = {
    "content": content_rows,
    "turn": turn_rows,
    "depth": depth_rows,
    "load": load_rows,
}


def axis_table(
    spec: TableSpec,
    measures: Any,
    boots: Mapping[str, str | None] | None = None,
    flags: RunFlags | None = None,
) -> Table:
    """The table of one spec with rows (lane, label) for each row of its declared axis a lane has, in that
    order; `boots` and `flags` as for tables.build_table (interval unit, † marks and their notes)."""
    import pandas as pd

    rows_of = AXIS_ROWS[spec.axis]
    keys: list[tuple[str, str]] = []
    grid: list[list[str]] = []
    lanes: list[LaneColumn] = []
    notes: list[str] = []
    forms = {spec.interval_of(row) for row in spec.rows} - {"range"}
    for lane, part in lane_groups(measures, spec):
        found = rows_of(part)
        if not found:
            continue
        runs = sorted(part["run"].unique())
        lane.unit = unit_of(runs, boots)
        pairs = run_flags(runs, flags)
        used: set[int] = set()
        for axis_row in found:
            values = []
            for row in spec.rows:
                shown = axis_row.read(row)
                values.append(mark_cell(cell(shown, part, lane, spec.interval_of(row)), shown, pairs, used))
            keys.append((lane.title, axis_row.label))
            grid.append(values)
        lanes.append(lane)
        notes += [flag_note(lane, *pairs[i]) for i in sorted(used)]
    keep = [
        i
        for i in range(len(spec.rows))
        if not spec.drop_empty_rows or any(values[i] != MISSING for values in grid)
    ]
    index = pd.MultiIndex.from_tuples(keys, names=["lane", spec.axis]) if keys else pd.Index([], name="lane")
    frame = pd.DataFrame(
        [[values[i] for i in keep] for values in grid],
        index=index,
        columns=[spec.rows[i].label for i in keep],
        dtype=object,
    )
    shown_forms = {spec.interval_of(spec.rows[i]) for i in keep} & forms
    notes = list(spec.notes) + ([interval_note(lanes, shown_forms)] if shown_forms and lanes else []) + notes
    return Table(id=spec.id, title=spec.title, frame=frame, lanes=lanes, notes=notes, empty=spec.empty)
