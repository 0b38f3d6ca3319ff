"""The `labkit report` action: every stored run (and sweep record) in, results/TABLES.md and the plot PNGs out.

`labkit report` writes TABLES.md (atomically) and the plots next to it; `labkit report --check` fails when
the committed file no longer matches the data. Nothing here is formatted: the tables come finished from
tables.py.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.report.axis_table import axis_table
from labkit.report.plots import save_all
from labkit.report.specs import AXES, MEASURED_BESIDE, TOOLS, ColumnSpec, TableSpec, load_spec, spec_path
from labkit.report.stats import boot_of
from labkit.report.sweep import select_sweeps, sweep_table
from labkit.report.tables import Table, as_list, build_table, flags_of, render_document
from labkit.report.tools_table import tools_table
from labkit.store import StoredRun, SweepRecord

TABLES_FILE = "TABLES.md"


@dataclass
class Report:
    markdown: str
    tables: list[Table]
    tables_path: Path
    plots: list[Path]
    skipped: list[tuple[str, str]]


def stored_tables(
    data: Any,
    specs: list[TableSpec],
    *,
    measures: Any = None,
    only: list[str] | None = None,
    recipes: list[str] | None = None,
    sweeps: list[SweepRecord] | None = None,
) -> list[Table]:
    """The tables of loaded results (`measures`: a subset of data.measures, default all), in spec order,
    with what the run folders say beside the figures: each run's boot (the unit of interval rows) and its
    evidence flags. Sweep tables read the sweep records (`sweeps`, default those stored under data.root);
    docs/sweeps.md, "The sweep table and plot". Axis tables have a row per lane and value of their declared
    axis: content category, session turn, or depth and cache state (axis_table.py)."""
    from labkit.store import load_sweeps

    boots = {rid: boot_of(doc) for rid, doc in data.docs.items()}
    flags = {rid: flags_of(doc) for rid, doc in data.docs.items()}
    rows = data.measures if measures is None else measures
    recipes, only = as_list(recipes), as_list(only)
    if recipes:
        rows = rows[rows["recipe"].isin(recipes)]
    chosen = [spec for spec in specs if not only or spec.id in only]
    if sweeps is None and any(spec.is_sweep or not spec.sweep_points for spec in chosen):
        sweeps = load_sweeps(data.root)
    points = {(r.recipe, p.variant_id) for r in sweeps or () for p in r.points}
    tables: list[Table] = []
    for spec in chosen:
        if spec.axis == TOOLS:  # its figures' definitions are in the run folders, not the measures frame
            docs = {rid: d for rid, d in data.docs.items() if not recipes or d.recipe in recipes}
            tables.append(tools_table(spec, docs))
        elif spec.is_sweep:  # a named sweep is checked against every record, then the recipes filter applies
            picked = [r for r in select_sweeps(spec, sweeps or []) if not recipes or r.recipe in recipes]
            tables += [sweep_table(spec, r, rows, boots, flags) for r in picked]
        else:
            spec = with_measured_beside(spec, data.docs)
            build = axis_table if spec.axis in AXES else build_table
            if spec.columns is None and not spec.sweep_points and points and len(rows):
                lanes = list(
                    zip(rows["recipe"], rows["variant"], strict=True)
                )  # sweep points have their own tables
                tables.append(build(spec, rows[[lane not in points for lane in lanes]], boots, flags))
            else:
                tables.append(build(spec, rows, boots, flags))
    return tables


def with_measured_beside(spec: TableSpec, docs: Mapping[str, StoredRun]) -> TableSpec:
    """A note-style table (`measured = "beside"`) with, after each column of recorded figures, one column per
    variant of the same recipe measured since whose variant choices include the recorded ones (the recipe may
    have gained an axis since, so the measured variant id can be longer); sweep points are left to their own
    tables. The spec as it is otherwise."""
    if spec.measured != MEASURED_BESIDE or spec.columns is None:
        return spec
    columns: list[ColumnSpec] = []
    for col in spec.columns:
        columns.append(col)
        if col.source != "recorded":
            continue
        recorded = [
            d
            for d in docs.values()
            if d.source == "recorded" and (d.recipe, d.variant_id) == (col.recipe, col.variant)
        ]
        if not recorded:
            continue
        chose = dict(recorded[0].variants)
        found = sorted(
            {
                d.variant_id
                for d in docs.values()
                if d.source == "measured"
                and d.recipe == col.recipe
                and not d.provenance.sweep_axes
                and all(d.variants.get(axis) == name for axis, name in chose.items())
            }
        )
        for variant in found:
            title = f"{col.title}, measured" + (f" [{variant}]" if len(found) > 1 else "")
            columns.append(ColumnSpec(title, col.recipe, variant, "measured"))
    return dataclasses.replace(spec, columns=tuple(columns))


def generate(
    results: str | Path | None = None,
    spec: str | Path | None = None,
    *,
    write: bool = True,
    plots: bool = True,
    out: str | Path | None = None,
    recipes: list[str] | None = None,
) -> Report:
    """Load runs, build the tables, and (write=True) write TABLES.md atomically plus PNG plots."""
    from labkit.store import atomic_write_text, load_results

    data = load_results(results)
    title, specs = load_spec(spec_path(data.root, spec))
    tables = stored_tables(data, specs, recipes=recipes)
    markdown = render_document(title, tables)
    target = Path(out) if out else data.root / TABLES_FILE
    made: list[Path] = []
    if write:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, markdown)
        if plots:
            made = save_all(data, target.parent / "plots", specs)  # next to the tables they illustrate
    return Report(markdown, tables, target, made, data.skipped)


def check(results: str | Path | None = None, spec: str | Path | None = None) -> tuple[bool, str]:
    """(up to date?, unified diff committed -> regenerated)."""
    rep = generate(results, spec, write=False, plots=False)
    try:
        current = rep.tables_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        current = ""
    if current == rep.markdown:
        return True, ""
    diff = difflib.unified_diff(
        current.splitlines(keepends=True),
        rep.markdown.splitlines(keepends=True),
        fromfile=f"{rep.tables_path} (committed)",
        tofile=f"{rep.tables_path} (regenerated)",
    )
    return False, "".join(diff)
