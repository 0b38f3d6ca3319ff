"""Comparison tables from stored runs: lanes as columns, measures as rows, every number formatted once.

Pure builders: the long-form measures DataFrame (labkit.store) -> a Table whose cells are finished
strings -> Markdown (tabulate with number parsing off, so "007" or "1e3" are never re-read) or a styled
pandas table for notebooks. Table definitions come from specs.py, the cell strings from format.py; rows
in an interval form (docs/measurement.md, "Intervals over runs") take their cells and note from intervals.py.
Runs whose summary carries evidence flags get FLAG_MARK beside the figures of the flagged window and a note
naming run, flag and message (docs/measurement.md, "Tables in the terminal").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.measure import WORKLOADS
from labkit.measures import axis_values, level_key, level_label, level_values, measure_key, window_covers
from labkit.report.format import MISSING, fmt_acceptance, fmt_kv, fmt_nfs, fmt_with_cold, with_cold
from labkit.report.intervals import interval_cell, interval_note
from labkit.report.specs import RowSpec, TableSpec
from labkit.report.stats import sim_title, stat, unit_of
from labkit.store import RunFlag, StoredRun

FLAG_MARK = "\u2020"  # "†" beside a figure one of whose runs carries an evidence flag
RunFlags = Mapping[str, Sequence[RunFlag] | None]  # run id -> its summary's evidence flags
DEFAULT_MEASURES = {
    "acceptance": "accept_per_draft",
    "kv": "kv_pool_tokens",
    "nfs": "nfs_read_bytes_per_completion",
}


@dataclass
class LaneColumn:
    """One column of a lane table (a row with lanes = "rows", and a sweep point's row): whose runs, how many."""

    title: str
    recipe: str
    variant: str
    source: str | None
    simulated: bool
    runs: int
    unit: str = "runs"  # what one run value is: boots, runs on one boot, runs (stats.unit_of)


@dataclass
class Table:
    """A finished table: `frame` holds display strings (index = row labels, columns = lane titles)."""

    id: str
    title: str
    frame: Any  # pandas.DataFrame of str
    lanes: list[LaneColumn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    empty: str = ""

    @property
    def sim_titles(self) -> list[str]:
        return [lane.title for lane in self.lanes if lane.simulated]


def lane_groups(measures: Any, spec: TableSpec) -> list[tuple[LaneColumn, Any]]:
    """(LaneColumn, its rows of the measures frame) for each column of the table."""
    out = []
    if spec.columns is None:
        df = measures if spec.source is None else measures[measures["source"] == spec.source]
        for (recipe, variant, simulated), part in df.groupby(["recipe", "variant", "simulated"], sort=True):
            latest = part.sort_values("run").iloc[-1]
            lane = LaneColumn(
                sim_title(str(latest["label"]) or recipe, bool(simulated)),
                recipe,
                variant,
                spec.source,
                bool(simulated),
                part["run"].nunique(),
            )
            out.append((lane, part))
        titles = [lane.title for lane, _ in out]
        for lane, _ in out:  # two variants sharing a label: name the variant so columns stay distinct
            if titles.count(lane.title) > 1:
                lane.title = f"{lane.title} [{lane.variant}]"
        return out
    for col in spec.columns:
        mask = (measures["recipe"] == col.recipe) & (measures["variant"] == col.variant)
        if col.source:
            mask &= measures["source"] == col.source
        part = measures[mask]
        simulated = bool(part["simulated"].any()) if len(part) else False
        out.append(
            (
                LaneColumn(
                    sim_title(col.title, simulated),
                    col.recipe,
                    col.variant,
                    col.source,
                    simulated,
                    part["run"].nunique(),
                ),
                part,
            )
        )
    return out


def expand_rows(rows: tuple[RowSpec, ...], measures: Any) -> list[RowSpec]:
    """The row specs with each "prefill_*" row (a "*" standing for a prompt length) expanded to one row per
    matching measure present, and each row whose label holds "{L}" to one row per load level at which its
    measure is present (c4, then 0.5/s)."""
    present = set(measures["measure"].unique()) if len(measures) else set()
    out = []
    for row in rows:
        if "*" in row.measure:
            # "prefill_*" is the family prefill_<P>: prefill_4096, not prefill_4096_raw or _ttft;
            # "interference_*_stall" the family interference_<P>_stall
            family = row.measure.replace("*", "<P>")
            for tokens in axis_values(present, family, "prompt"):
                label = row.label.replace("{P}", f"{tokens:,}")
                out.append(dataclasses.replace(row, label=label, measure=measure_key(family, prompt=tokens)))
        elif "{L}" in row.label:
            for axis, value in level_values(present, row.measure):
                label = row.label.replace("{L}", level_label(axis, value))
                out.append(dataclasses.replace(row, label=label, measure=level_key(row.measure, axis, value)))
        else:
            out.append(row)
    return out


def cell(row: RowSpec, part: Any, lane: LaneColumn, form: str = "range") -> str:
    """The display string of one row for one lane; `form` "pm" or "ci" shows a number row's 95 % interval
    with what its runs are (intervals.interval_cell: from at least 3 run values, else the range form)."""
    if row.format == "runs":
        return str(lane.runs) if lane.runs else MISSING
    if row.format == "acceptance":
        return fmt_acceptance(
            stat(part, row.measure or "accept_per_draft"), stat(part, "accept_k"), row.decimals
        )
    if row.format == "kv":
        return fmt_kv(stat(part, row.measure or "kv_pool_tokens"), stat(part, "kv_pool_context"))
    if row.format == "nfs":
        return fmt_nfs(stat(part, row.measure or "nfs_read_bytes_per_completion"), row.per)
    cold = stat(part, row.cold) if row.cold else None
    main = stat(part, row.measure)
    if form == "range":
        return fmt_with_cold(main, cold, row.decimals, row.thousands)
    text = interval_cell(row, part, main, lane.unit, form)
    return with_cold(text, cold, row.decimals, row.thousands)


def flags_of(doc: StoredRun) -> list[RunFlag]:
    """The evidence flags a stored run's summary carries; none in older runs."""
    return list(doc.summary.flags)


def whole_run(window: str | None) -> bool:
    """A flag whose window is no workload's own (none, "run", "boot", ...) covers the whole lane: the windows
    that cover only their own measures (decode, prefill_4096, agentic, idle_60, depth_8192, ...) are the
    registry's workloads', but those whose flags speak of the whole run (the canary's)."""
    own = tuple(p for w in WORKLOADS.values() if w.local_windows for p in w.windows)
    return not window or not window.startswith(own)


def in_window(measure: str, window: str | None) -> bool:
    """Whether a measure was taken in a flag's window (measures.window_covers); a whole-run flag is no window."""
    return window is not None and not whole_run(window) and window_covers(window, measure)


def flag_marks(row: RowSpec, lane_flags: list[tuple[str, RunFlag]]) -> list[int]:
    """Indexes of the lane's (run, flag) pairs that cover this row."""
    measures = [m for m in (row.measure or DEFAULT_MEASURES.get(row.format, ""), row.cold) if m]
    return [
        i
        for i, (_, flag) in enumerate(lane_flags)
        if whole_run(flag.window) or any(in_window(m, flag.window) for m in measures)
    ]


def run_flags(runs: Sequence[str], flags: RunFlags | None) -> list[tuple[str, RunFlag]]:
    """(run id, flag) for each evidence flag the runs carry, in run order: what `flag_marks` indexes."""
    return [(r, f) for r in runs for f in (flags or {}).get(r) or ()]


def mark_cell(text: str, row: RowSpec, pairs: list[tuple[str, RunFlag]], used: set[int]) -> str:
    """`text` with FLAG_MARK when a flag of `pairs` covers `row` (never on a missing cell); the indexes of
    the flags that marked it go into `used`, for their notes."""
    hits = flag_marks(row, pairs)
    if not hits or text == MISSING:
        return text
    used.update(hits)
    return f"{text} {FLAG_MARK}"


def flag_note(lane: LaneColumn, run: str, flag: RunFlag) -> str:
    """The note under a table for one flag of one run, keyed by FLAG_MARK."""
    window = flag.window or "whole run"
    message = flag.message.strip()
    return f"{FLAG_MARK} {lane.title}, run {run}, {window}: {flag.code}" + (
        f": {message}" if message else "."
    )


def build_table(
    spec: TableSpec,
    measures: Any,
    boots: Mapping[str, str | None] | None = None,
    flags: RunFlags | None = None,
) -> Table:
    """Table of display strings for one spec from the long-form measures frame; `boots` (run id -> the
    boot it ran on, stats.boot_of) names the unit of interval rows, "runs" without it; `flags` (run id ->
    its summary's evidence flags, flags_of) marks the figures they cover and adds a note per flag."""
    import pandas as pd

    groups = lane_groups(measures, spec)
    lane_flags = []  # per lane: (run id, flag) of each flag its runs carry
    for lane, part in groups:
        runs = sorted(part["run"].unique()) if len(part) else []
        lane.unit = unit_of(runs, boots) if runs else "runs"
        lane_flags.append(run_flags(runs, flags))
    rows = expand_rows(spec.rows, measures)
    grid: dict[str, list[str]] = {}
    labels: list[str] = []
    forms: set[str] = set()
    used: list[set[int]] = [set() for _ in groups]  # per lane: the flags (by index) its cells mark
    for row in rows:
        form = spec.interval_of(row)
        values = [cell(row, part, lane, form) for lane, part in groups]
        if spec.drop_empty_rows and (not groups or all(v == MISSING for v in values)):
            continue
        values = [mark_cell(values[i], row, pairs, used[i]) for i, pairs in enumerate(lane_flags)]
        labels.append(row.label)
        grid[row.label] = values
        if form != "range":
            forms.add(form)
    titles = [lane.title for lane, _ in groups]
    frame = pd.DataFrame(
        [grid[label] for label in labels],
        index=pd.Index(labels, name=spec.corner),
        columns=titles,
        dtype=object,
    )
    if spec.lanes == "rows":
        frame = frame.T
        frame.index.name = spec.corner
    lanes = [lane for lane, _ in groups]
    notes = list(spec.notes) + ([interval_note(lanes, forms)] if forms else [])
    for lane, pairs, hit in zip(lanes, lane_flags, used, strict=True):
        notes += [flag_note(lane, *pairs[i]) for i in sorted(hit)]
    return Table(id=spec.id, title=spec.title, frame=frame, lanes=lanes, notes=notes, empty=spec.empty)


def as_list(value: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    """Notebook parameters arrive as lists or as 'a,b' strings from the command line."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value)


def build_tables(
    measures: Any,
    specs: list[TableSpec],
    only: list[str] | None = None,
    recipes: list[str] | None = None,
    boots: Mapping[str, str | None] | None = None,
    flags: RunFlags | None = None,
) -> list[Table]:
    """All lane tables (or those whose id is in `only`), optionally restricted to runs of some recipes;
    `boots` and `flags` as for build_table. Sweep tables need the sweep records: sweep.sweep_tables builds
    them, axis_table.py the axis tables, action.stored_tables every kind in spec order."""
    recipes, only = as_list(recipes), as_list(only)
    if recipes:
        measures = measures[measures["recipe"].isin(recipes)]
    return [
        build_table(spec, measures, boots, flags)
        for spec in specs
        if (not only or spec.id in only) and not spec.is_sweep and not spec.axis
    ]


def grid(table: Table, tablefmt: str) -> str:
    """The table's cells as a tabulate grid (measure column left, figures right); cells are already strings
    and are not re-parsed. "pipe" for TABLES.md, "simple" for a terminal."""
    from tabulate import tabulate

    data = table.frame.reset_index()
    headers = [str(c) for c in data.columns]
    body = [[str(v) for v in row] for row in data.itertuples(index=False)]
    colalign = ("left",) + ("right",) * (len(headers) - 1)
    return tabulate(body, headers=headers, tablefmt=tablefmt, disable_numparse=True, colalign=colalign)


def to_markdown(table: Table) -> str:
    """GitHub Markdown for one table; cells are already strings and are not re-parsed."""
    lines = [f"## {table.title}", ""]
    frame = table.frame
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        lines.append(f"_{table.empty}_")
    else:
        lines += [grid(table, "pipe"), "", runs_line(table)]
    for note in table.notes:
        lines += ["", note]
    return "\n".join(lines) + "\n"


def runs_line(table: Table) -> str:
    """'Runs: 2 (measured).': how many runs the table's lanes hold, and of which sources."""
    sources = sorted({lane.source or "any" for lane in table.lanes})
    return f"Runs: {sum(lane.runs for lane in table.lanes)} ({', '.join(sources)})."


def render_document(title: str, tables: list[Table]) -> str:
    """TABLES.md: a stable header and every table; no timestamps, so regeneration is byte-identical."""
    parts = [
        f"# {title}",
        "",
        "<!-- Generated by `labkit report` from results/*/*/*/run.json and results/tables.toml. "
        "Do not edit: `labkit report --check` fails when this file drifts from the data. -->",
        "",
        "Cells: median over runs with the min\u2013max range in brackets, a bare range where only a range was "
        "recorded, ~ approximate, (x cold) the first turn after boot, \u2014 not measured, (sim) simulated.",
        "",
    ]
    for table in tables:
        parts.append(to_markdown(table))
    return "\n".join(parts).rstrip("\n") + "\n"


def to_styler(table: Table) -> Any:
    """A pandas Styler for notebooks: caption, simulated columns shaded (needs jinja2)."""
    styler = table.frame.style.set_caption(table.title)
    sims = [t for t in table.sim_titles if t in table.frame.columns]
    if sims:
        styler = styler.set_properties(subset=sims, **{"background-color": "#fff3cd"})
    return styler
