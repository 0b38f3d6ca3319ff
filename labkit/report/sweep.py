"""The sweep table: a sweep record (labkit.store.SweepRecord) and the stored runs in, one Table out, with a
row per point in record order, the swept value of each axis leading and a column per measure row spec
(docs/sweeps.md, "The sweep table and plot").

Pure: the long-form measures frame (which holds complete runs only) and the record in, finished strings
out, rendered like every table (tables.to_markdown, text.to_text). A point's cells use only the runs its
record lists; the cells are those of tables.cell (ranges, or a 95 % interval from at least 3 runs), a failed
point reads "failed" with its reason in a note, a point not reached reads "not measured".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from labkit.report.format import MISSING
from labkit.report.specs import SWEEPS_AUTO, ReportError, RowSpec, TableSpec
from labkit.report.stats import sim_title, unit_of
from labkit.report.tables import (
    LaneColumn,
    RunFlags,
    Table,
    cell,
    expand_rows,
    flag_note,
    interval_note,
    mark_cell,
    run_flags,
)
from labkit.store import RunFlag, SweepAxisRecord, SweepPoint, SweepRecord

FAILED = "failed"  # every cell of a failed point
NOT_MEASURED = "not measured"  # every cell of a point the sweep has not reached (status pending)
MEASURED = ("measured", "resumed")  # statuses whose runs are shown
NO_FIGURE = (MISSING, FAILED, NOT_MEASURED)


def value_text(value: Any) -> str:
    """A swept value as the table shows it: 8192, 0.9, true, fp8."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def point_name(record: SweepRecord, point: SweepPoint) -> str:
    """'mnbt=8192' (', '-joined over the axes): how notes and the plot name a point."""
    return ", ".join(f"{a.short}={value_text(point.values.get(a.short))}" for a in record.axes)


def axis_header(axis: SweepAxisRecord) -> str:
    """The column header of an axis: the swept flag or key name (`--max-num-batched-tokens`)."""
    return str(axis.key[-1]) if axis.key else axis.short


def swept_keys(record: SweepRecord) -> str:
    """The swept keys as written: grid axes joined by ' × ', zipped ones by ' with '."""
    return (" with " if record.zipped else " \u00d7 ").join(a.dotted for a in record.axes)


def sweep_title(record: SweepRecord, simulated: bool = False) -> str:
    """'sim/mnbt [spec=none] over engine.args."--max-num-batched-tokens" (sim)': recipe, sweep name, the
    variants every point shares and the swept keys."""
    base = ", ".join(f"{k}={v}" for k, v in sorted(record.base_variants.items())) or "default variants"
    return sim_title(f"{record.recipe}/{record.name} [{base}] over {swept_keys(record)}", simulated)


def point_rows(record: SweepRecord, point: SweepPoint, measures: Any) -> Any:
    """The rows of the measures frame from the point's listed runs (the frame holds complete runs only)."""
    if not len(measures):
        return measures
    mask = (measures["recipe"] == record.recipe) & (measures["variant"] == point.variant_id)
    return measures[mask & measures["run"].isin(list(point.runs))]


def point_lanes(
    record: SweepRecord, measures: Any, boots: Mapping[str, str | None] | None = None
) -> list[tuple[LaneColumn, Any]]:
    """(LaneColumn, its rows) per point in record order; a failed or pending point's lane counts no runs."""
    out = []
    for point in record.points:
        part = point_rows(record, point, measures)
        shown = point.status in MEASURED
        runs = sorted(part["run"].unique()) if len(part) and shown else []
        lane = LaneColumn(
            title=point_name(record, point),
            recipe=record.recipe,
            variant=point.variant_id,
            source=str(part["source"].iloc[0]) if len(part) else "measured",
            simulated=bool(part["simulated"].any()) if len(part) else False,
            runs=len(runs),
            unit=unit_of(runs, boots) if runs else "runs",
        )
        out.append((lane, part))
    return out


def point_notes(record: SweepRecord, lanes: Sequence[tuple[LaneColumn, Any]]) -> list[str]:
    """Why a point has no figures: its failure reason, not reached, or listed runs with no stored measures."""
    notes = []
    for point, (lane, part) in zip(record.points, lanes, strict=True):
        if point.status == "failed":
            notes.append(f"point {lane.title} failed: {point.reason.strip() or 'no reason recorded'}")
        elif point.status == "pending":
            notes.append(f"point {lane.title} not measured: the sweep has not reached it.")
        else:
            found = set(part["run"].unique()) if len(part) else set()
            lost = [r for r in point.runs if r not in found]
            if lost:
                notes.append(
                    f"point {lane.title}: run(s) {', '.join(lost)} of the sweep record have no stored "
                    "measures (not complete, or missing) and are left out."
                )
    return notes


NFS_MARK = " \u2021"  # ‡ after a point's first swept value: it read from the shared NFS while measuring


def nfs_reads(lanes: Sequence[tuple[LaneColumn, Any]]) -> dict[int, float]:
    """{point index: the most NFS bytes one of its runs read while measuring}, for the points whose runs read
    any: a lane that reads its model from the NAS during the windows measures the NAS too."""
    out = {}
    for i, (_, part) in enumerate(lanes):
        if not len(part):
            continue
        values = part[part["measure"] == "nfs_read_bytes"]["value"].dropna()
        if len(values) and float(values.max()) > 0:
            out[i] = float(values.max())
    return out


def nfs_notes(lanes: Sequence[tuple[LaneColumn, Any]], nfs: Mapping[int, float]) -> list[str]:
    return [
        f"\u2021 point {lanes[i][0].title}: a run read {read / 1e6:,.0f} MB from the shared NFS while measuring "
        '(nfs_read_bytes): its figures may measure the NAS (docs/sweeps.md, "Checked before the first boot").'
        for i, read in sorted(nfs.items())
    ]


def point_cells(
    spec: TableSpec,
    rows: list[RowSpec],
    point: SweepPoint,
    lane: LaneColumn,
    part: Any,
    pairs: list[tuple[str, RunFlag]],
) -> tuple[list[str], set[int]]:
    """One point's cells (one per row spec) and the indexes of its (run, flag) pairs that mark them."""
    if point.status == "failed":
        return [FAILED] * len(rows), set()
    if point.status not in MEASURED:
        return [NOT_MEASURED] * len(rows), set()
    values: list[str] = []
    used: set[int] = set()
    for row in rows:
        values.append(mark_cell(cell(row, part, lane, spec.interval_of(row)), row, pairs, used))
    return values, used


def sweep_table(
    spec: TableSpec,
    record: SweepRecord,
    measures: Any,
    boots: Mapping[str, str | None] | None = None,
    flags: RunFlags | None = None,
) -> Table:
    """The table of one sweep record: a row per point, the axes' values first, a column per row spec;
    `boots` and `flags` as for tables.build_table (interval unit, † marks and their notes)."""
    import pandas as pd

    lanes = point_lanes(record, measures, boots)
    shown = [part for (lane, part), p in zip(lanes, record.points, strict=True) if p.status in MEASURED]
    rows = expand_rows(spec.rows, pd.concat(shown) if shown else measures.iloc[0:0])
    grid, flag_notes = [], []
    for point, (lane, part) in zip(record.points, lanes, strict=True):
        runs = sorted(part["run"].unique()) if lane.runs else []
        pairs = run_flags(runs, flags)
        values, used = point_cells(spec, rows, point, lane, part, pairs)
        grid.append(values)
        flag_notes += [flag_note(lane, *pairs[i]) for i in sorted(used)]
    keep = [
        i
        for i in range(len(rows))
        if not spec.drop_empty_rows or any(values[i] not in NO_FIGURE for values in grid)
    ]
    names = [axis_header(a) for a in record.axes]
    nfs = nfs_reads(lanes)
    keys = [
        tuple(
            value_text(p.values.get(a.short)) + (NFS_MARK if j == 0 and i in nfs else "")
            for j, a in enumerate(record.axes)
        )
        for i, p in enumerate(record.points)
    ]
    index = (
        pd.MultiIndex.from_tuples(keys, names=names)
        if len(names) > 1 and keys
        else pd.Index([k[0] if k else "" for k in keys], name=names[0] if names else spec.corner)
    )
    frame = pd.DataFrame(
        [[values[i] for i in keep] for values in grid],
        index=index,
        columns=[rows[i].label for i in keep],
        dtype=object,
    )
    forms = {spec.interval_of(rows[i]) for i in keep} - {"range"}
    counted = [lane for lane, _ in lanes if lane.runs]
    notes = list(spec.notes) + ([interval_note(counted, forms)] if forms and counted else [])
    notes += point_notes(record, lanes) + flag_notes + nfs_notes(lanes, nfs)
    simulated = any(lane.simulated for lane, _ in lanes)
    prefix = "" if spec.title == spec.id else f"{spec.title}: "
    return Table(
        id=f"{spec.id}:{record.recipe}/{record.name}",
        title=prefix + sweep_title(record, simulated),
        frame=frame,
        lanes=[lane for lane, _ in lanes],
        notes=notes,
        empty=spec.empty,
    )


def select_sweeps(spec: TableSpec, records: Sequence[SweepRecord]) -> list[SweepRecord]:
    """The records a sweep table shows: all (`sweeps = "auto"`) or the named one; ReportError naming the
    file, table and key, with the stored sweeps, when the named one is not stored."""
    if spec.sweep == SWEEPS_AUTO:
        return list(records)
    found = [r for r in records if f"{r.recipe}/{r.name}" == spec.sweep]
    if not found:
        stored = ", ".join(f"{r.recipe}/{r.name}" for r in records) or "none (no results/_sweeps/ records)"
        raise ReportError(
            f"{spec.where or spec.id}: sweep = {spec.sweep!r} is not a stored sweep record; stored: {stored}"
        )
    return found


def sweep_tables(
    spec: TableSpec,
    records: Sequence[SweepRecord],
    measures: Any,
    boots: Mapping[str, str | None] | None = None,
    flags: RunFlags | None = None,
) -> list[Table]:
    """One table per record the spec selects (select_sweeps); none for `sweeps = "auto"` without records."""
    return [sweep_table(spec, r, measures, boots, flags) for r in select_sweeps(spec, records)]
