"""The table "Same measures, several tools": a row per lane, labkit's own runs and files imported from other
tools side by side, each figure with the definition it has. An imported figure that speaks of a labkit
measure (its `about`, docs/imports.md) stands in that measure's column converted to its unit, and its
definition is named in a note, so no reader takes two definitions for one.

Pure: stored runs (store.StoredRun) in, a finished Table out. `tools = "auto"` picks every lane holding imported runs and the
labkit-measured lanes of the recipes those were imported under; explicit `columns` pick lanes as a lane table
does. A cell is the median over the lane's runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from labkit.measures import LEVEL_AXES, level_key, parse_key
from labkit.measures import level_label as measures_level_label
from labkit.report.format import MISSING
from labkit.report.gate import about_rows, imported, tool_of
from labkit.report.specs import RowSpec, TableSpec
from labkit.report.tables import LaneColumn, Table
from labkit.store import IMPORT_SOURCE, MeasureInfo, StoredRun

IMPORTED_MARK = "\u2021"  # "‡" beside an imported figure


def figure_of(doc: StoredRun, measure: str) -> tuple[float, str, str] | None:
    """(value in the measure's unit, definition id, its text) of one run for one labkit measure, or None."""
    method = doc.summary.method
    value = doc.summary.measures.get(measure)
    if not imported(doc):
        text = f"labkit {measure}: {method.get(measure, '')}"
        return None if value is None else (value, f"labkit:{measure}", text)
    key, row = about_rows(doc).get(measure) or ("", MeasureInfo())
    if row.converted is None:
        return None
    ident = row.definition or key  # a tool's definition applied by another has an id of its own
    differs = f"; against labkit's {measure}: {row.load_differs}" if row.about == row.load_about else ""
    return row.converted, ident, f"{ident} ({row.convert}): {method.get(key, '')}{differs}"


def tool_lanes(spec: TableSpec, docs: Mapping[str, StoredRun]) -> dict[tuple[str, str], list[StoredRun]]:
    """{(recipe, variant): complete runs} in the table, in recipe then variant order."""
    lanes: dict[tuple[str, str], list[StoredRun]] = {}
    for doc in docs.values():
        if doc.status == "complete":
            lanes.setdefault((doc.recipe, doc.variant_id), []).append(doc)
    if spec.columns is not None:
        return {(c.recipe, c.variant): lanes.get((c.recipe, c.variant), []) for c in spec.columns}
    recipes = {lane[0] for lane, runs in lanes.items() if any(imported(d) for d in runs)}
    return {lane: runs for lane, runs in sorted(lanes.items()) if lane[0] in recipes}


def source_of(runs: Sequence[StoredRun]) -> str:
    latest = sorted(runs, key=lambda d: d.run_id)[-1]
    if not imported(latest):
        return "labkit" + (" (simulated)" if latest.simulated else "")
    return f"{tool_of(latest)} {IMPORTED_MARK}"


Level = tuple[str, int | float]


def is_level_row(row: RowSpec) -> bool:
    """A row of a load family named without its level (load_ttft@stat=p50): read at each level a lane has."""
    found = parse_key(row.measure) if row.measure.startswith("load_") else None
    return found is not None and all(found.get(axis) is None for axis in LEVEL_AXES)


def levels_of(doc: StoredRun) -> set[Level]:
    """The load levels a run has figures of: its own keys, or an import's load measures (its file's level)."""
    keys = about_rows(doc) if imported(doc) else doc.summary.measures
    found = (parse_key(k) for k in keys if k.startswith("load_"))
    return {
        (axis, v)
        for k in found
        if k is not None
        for axis in LEVEL_AXES
        if isinstance(v := k.get(axis), int | float)
    }


def level_label(level: Level) -> str:
    """c4 or 0.5/s, as the load table names a level (labkit/measures.py)."""
    return measures_level_label(*level)


@dataclass(frozen=True)
class _Row:
    """One row of the tools table: its name, lane, runs, load level (None: the lane's own figures) and the
    cells before the figures."""

    name: str
    recipe: str
    variant: str
    runs: list[StoredRun]
    level: Level | None
    lead: list[str]


def tools_table(spec: TableSpec, docs: Mapping[str, StoredRun]) -> Table:
    """A row per lane; with load rows (a load family without its level), a row per load level and lane, the
    lanes of one level together, so a labkit level and an imported file of that level are read side by side."""
    if any(is_level_row(row) for row in spec.rows):
        return _table(spec, _level_rows(spec, docs), ["level", "source", "runs"], "level and lane")
    return _table(spec, _lane_rows(spec, docs), ["source", "runs"], "lane")


def _lane_rows(spec: TableSpec, docs: Mapping[str, StoredRun]) -> list[_Row]:
    return [
        _Row(
            f"{recipe}/{variant}",
            recipe,
            variant,
            runs,
            None,
            [source_of(runs) if runs else MISSING, str(len(runs))],
        )
        for (recipe, variant), runs in tool_lanes(spec, docs).items()
    ]


def _level_rows(spec: TableSpec, docs: Mapping[str, StoredRun]) -> list[_Row]:
    """A row per load level and lane, levels in the load table's order, each with the lane's runs at it."""
    found: dict[Level, list[_Row]] = {}
    for (recipe, variant), runs in tool_lanes(spec, docs).items():
        held = [(d, levels_of(d)) for d in runs]
        for level in set().union(*(levels for _, levels in held)):
            at = [d for d, levels in held if level in levels]
            name = f"{level_label(level)} {recipe}/{variant}"
            lead = [level_label(level), source_of(at), str(len(at))]
            found.setdefault(level, []).append(_Row(name, recipe, variant, at, level, lead))
    order = sorted(found, key=lambda lv: (LEVEL_AXES.index(lv[0]), float(lv[1])))
    return [row for level in order for row in found[level]]


def _table(spec: TableSpec, rows: list[_Row], columns: list[str], index_name: str) -> Table:
    """The table of these rows: their lead cells, then each row spec's figure and definition, the definitions
    numbered once in the notes."""
    import pandas as pd

    notes: list[str] = []
    numbers: dict[str, int] = {}
    lanes = [
        LaneColumn(
            r.name,
            r.recipe,
            r.variant,
            IMPORT_SOURCE if any(imported(d) for d in r.runs) else "measured",
            any(d.simulated for d in r.runs),
            len(r.runs),
        )
        for r in rows
    ]
    grid = [r.lead + _cells(spec, r.runs, r.level, numbers, notes) for r in rows]
    for row in spec.rows:
        columns = [*columns, row.label, f"{row.label}: definition"]
    frame = pd.DataFrame(
        grid, index=pd.Index([r.name for r in rows], name=index_name), columns=columns, dtype=object
    )
    lead = [
        f"{IMPORTED_MARK} imported from another tool's file (docs/imports.md): its own definition, converted."
    ]
    return Table(
        id=spec.id,
        title=spec.title,
        frame=frame,
        lanes=lanes,
        notes=[*spec.notes, *(lead if grid else []), *notes],
        empty=spec.empty,
    )


def _cells(
    spec: TableSpec, runs: Sequence[StoredRun], level: Level | None, numbers: dict[str, int], notes: list[str]
) -> list[str]:
    """A lane's figure and definition per row spec (at `level` for load rows), each definition numbered once."""
    cells: list[str] = []
    for row in spec.rows:
        measure = level_key(row.measure, *level) if level and is_level_row(row) else row.measure
        found = [f for f in (figure_of(d, measure) for d in runs) if f is not None]
        if not found:
            cells += [MISSING, MISSING]
            continue
        value = statistics.median(v for v, _, _ in found)
        ident, text = found[-1][1], found[-1][2]
        if ident not in numbers:
            numbers[ident] = len(numbers) + 1
            notes.append(f"[{numbers[ident]}] {text}")
        cells += [f"{value:,.{row.decimals}f}", f"[{numbers[ident]}] {ident}"]
    return cells
