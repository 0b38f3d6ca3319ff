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

from labkit.report.format import MISSING
from labkit.report.gate import about_rows, imported, tool_of
from labkit.report.specs import TableSpec
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
    return row.converted, ident, f"{ident} ({row.convert}): {method.get(key, '')}"


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


def tools_table(spec: TableSpec, docs: Mapping[str, StoredRun]) -> Table:
    import pandas as pd

    notes: list[str] = []
    numbers: dict[str, int] = {}
    index, grid, lanes = [], [], []
    for (recipe, variant), runs in tool_lanes(spec, docs).items():
        kind = IMPORT_SOURCE if any(imported(d) for d in runs) else "measured"
        simulated = any(d.simulated for d in runs)
        lanes.append(LaneColumn(f"{recipe}/{variant}", recipe, variant, kind, simulated, len(runs)))
        cells = [source_of(runs) if runs else MISSING, str(len(runs))]
        for row in spec.rows:
            found = [f for f in (figure_of(d, row.measure) for d in runs) if f is not None]
            if not found:
                cells += [MISSING, MISSING]
                continue
            value = statistics.median(v for v, _, _ in found)
            ident, text = found[-1][1], found[-1][2]
            if ident not in numbers:
                numbers[ident] = len(numbers) + 1
                notes.append(f"[{numbers[ident]}] {text}")
            cells += [f"{value:,.{row.decimals}f}", f"[{numbers[ident]}] {ident}"]
        index.append(f"{recipe}/{variant}")
        grid.append(cells)
    columns = ["source", "runs"]
    for row in spec.rows:
        columns += [row.label, f"{row.label}: definition"]
    frame = pd.DataFrame(grid, index=pd.Index(index, name="lane"), columns=columns, dtype=object)
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
