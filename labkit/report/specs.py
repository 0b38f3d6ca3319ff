"""Table definitions: results/tables.toml in, validated TableSpecs out (which lanes are columns, which
measures are rows and how each row is formatted). Bad input raises ReportError naming the file and table.
A sweep table (`sweeps = "auto"` or `sweep = "<recipe>/<name>"`) has no columns: its points are its rows
and its row specs become its columns (docs/sweeps.md, "The sweep table and plot"). An axis table
(`axis = "content"`, `"turn"` or `"depth"`) picks lanes like a lane table, has a row per lane and value of that
axis of the measure keys, and its row specs become its columns (axis_table.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError
from labkit.measures import label as measure_label
from labkit.measures import measure_info
from labkit.recipe import read_toml

TABLES_SPEC = "tables.toml"
FORMATS = ("number", "acceptance", "kv", "nfs", "runs")
# Cell forms of number rows: "range" (median and min–max, the default), "pm" ("49.1 ± 1.2"), "ci"
# ("49.1 [47.9, 50.3]"); docs/measurement.md, "Intervals over runs".
INTERVALS = ("range", "pm", "ci")
SWEEPS_AUTO = "auto"  # `sweeps = "auto"`: one table per stored sweep record
MEASURED_BESIDE = "beside"  # `measured = "beside"`: the lane's measured runs beside its recorded figures
SWEEP_ONLY = {"columns", "lanes", "source"}  # keys a sweep table does not take (its points are its rows)
# `axis = "<name>"`: an axis table (axis_table.py), each axis with what its rows are: a row per lane and value
AXES = {
    "content": "a row per lane and prompt content category",
    "turn": "a row per lane and agentic session turn, then idle turns",
    "depth": "a row per lane, context depth and cache state",
    "load": "a row per lane and load level, closed-loop concurrencies first, then open-loop rates",
}
# `tools = "auto"`: a row per lane, labkit's runs and other tools' imported files, each figure's definition named
# (tools_table.py); its TableSpec.axis is "tools"
TOOLS, TOOLS_AUTO = "tools", "auto"
# how tables.toml declared the axis tables before `axis`, each refused with its new spelling
FORMER_AXES = {"content": "content", "turns": "turn", "depths": "depth"}


class ReportError(LabkitError):
    """A table definition is malformed; names the file and table."""


@dataclass(frozen=True)
class ColumnSpec:
    title: str
    recipe: str
    variant: str
    source: str | None = None


@dataclass(frozen=True)
class RowSpec:
    label: str
    format: str = "number"
    measure: str = ""
    cold: str = ""
    decimals: int = 1
    thousands: bool = True
    per: str = "completion"
    interval: str = ""  # "": the table's form; else one of INTERVALS (number rows only)


@dataclass(frozen=True)
class TableSpec:
    id: str
    title: str
    columns: tuple[ColumnSpec, ...] | None  # None: one column per lane found (auto)
    rows: tuple[RowSpec, ...]
    corner: str = "measure"
    lanes: str = "columns"
    source: str | None = None  # auto columns: only runs of this source
    drop_empty_rows: bool = False
    empty: str = "No runs."
    notes: tuple[str, ...] = ()
    interval: str = "range"  # the cell form of number rows that do not choose one (INTERVALS)
    sweep: str = ""  # "": not a sweep table; SWEEPS_AUTO: one table per sweep record; else "<recipe>/<name>"
    sweep_points: bool = True  # auto columns: false leaves out lanes that are points of a stored sweep
    axis: str = ""  # "": lanes as columns or rows; one of AXES: a row per lane and axis value; TOOLS
    # MEASURED_BESIDE: after each column of recorded figures, a column per variant of that lane measured since
    measured: str = ""
    where: str = field(default="", compare=False)  # "<file>: table[i]", for errors found when building

    @property
    def is_sweep(self) -> bool:
        return bool(self.sweep)

    def interval_of(self, row: RowSpec) -> str:
        """The cell form of one row: its own interval, else the table's; only number rows have one."""
        return (row.interval or self.interval) if row.format == "number" else "range"


def default_spec_file() -> Path:
    from labkit.recipe import checkout

    return checkout() / "results" / TABLES_SPEC


def spec_path(root: str | Path, spec: str | Path | None = None) -> Path:
    """The table definitions for a results root: explicit file, else <root>/tables.toml, else the checkout's."""
    root = Path(root)
    if spec:
        return Path(spec)
    local = root / TABLES_SPEC
    return local if local.is_file() else default_spec_file()


def load_spec(path: str | Path | None = None) -> tuple[str, list[TableSpec]]:
    """(document title, tables) from tables.toml; ReportError names the file and table on bad input."""
    file = Path(path) if path else default_spec_file()
    data = read_toml(file, ReportError)
    tables, seen = [], set()
    for i, t in enumerate(data.get("table", [])):
        where = f"{file}: table[{i}]"
        try:
            spec = dataclasses.replace(_table_spec(t), where=where)
        except (KeyError, TypeError, ValueError) as e:
            raise ReportError(f"{where}: {e}")
        if spec.id in seen:
            raise ReportError(f"{where}: duplicate id {spec.id!r}")
        seen.add(spec.id)
        tables.append(spec)
    return str(data.get("title", "Comparison tables")), tables


def _known(d: dict[str, Any], allowed: set[str], what: str) -> None:
    unknown = set(d) - allowed
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {', '.join(sorted(unknown))}")


def _column_specs(cols: object) -> tuple[ColumnSpec, ...] | None:
    if cols == "auto":
        return None
    if isinstance(cols, list):
        columns = []
        for c in cols:
            _known(c, {"title", "recipe", "variant", "source"}, "column")
            columns.append(ColumnSpec(str(c["title"]), str(c["recipe"]), str(c["variant"]), c.get("source")))
        return tuple(columns)
    raise ValueError('columns must be a list of {title, recipe, variant} or "auto"')


def _interval(value: object, what: str) -> str:
    if value not in INTERVALS:
        raise ValueError(f"{what}: interval {value!r} is not one of {', '.join(INTERVALS)}")
    return str(value)


def _catalogue_label(measure: str) -> str:
    """A row without a label of its own is named as the catalogue names its measure, title and unit ("decode c1
    (t/s)"), so a workload's rows need not repeat them; KeyError (a missing label) for a key it does not know."""
    if measure_info(measure) is None:
        raise KeyError("label")
    return measure_label(measure)


def _row_spec(r: dict[str, Any]) -> RowSpec:
    _known(r, {"label", "format", "measure", "cold", "decimals", "thousands", "per", "interval"}, "row")
    fmt = r.get("format", "number")
    if fmt not in FORMATS:
        raise ValueError(f"row {r.get('label')!r}: format {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "number" and not r.get("measure"):
        raise ValueError(f"row {r.get('label')!r}: a number row needs a measure")
    interval = _interval(r["interval"], f"row {r.get('label')!r}") if "interval" in r else ""
    if interval and fmt != "number":
        raise ValueError(f"row {r.get('label')!r}: interval is for number rows, not format {fmt!r}")
    return RowSpec(
        label=str(r["label"] if "label" in r else _catalogue_label(r.get("measure", ""))),
        format=fmt,
        measure=r.get("measure", ""),
        cold=r.get("cold", ""),
        decimals=int(r.get("decimals", 2 if fmt == "acceptance" else 1)),
        thousands=bool(r.get("thousands", True)),
        per=str(r.get("per", "completion")),
        interval=interval,
    )


def _table_spec(t: dict[str, Any]) -> TableSpec:
    former = [key for key in FORMER_AXES if key in t]
    if former:
        raise ValueError(f'{former[0]} = "auto" is written axis = "{FORMER_AXES[former[0]]}" now')
    _known(
        t,
        {
            "id",
            "title",
            "columns",
            "rows",
            "corner",
            "lanes",
            "source",
            "drop_empty_rows",
            "empty",
            "notes",
            "interval",
            "sweeps",
            "sweep",
            "sweep_points",
            "axis",
            "measured",
            TOOLS,
        },
        "table",
    )
    measured = str(t.get("measured", ""))
    if measured not in ("", MEASURED_BESIDE):
        raise ValueError(f'measured = {measured!r}: the one form is "{MEASURED_BESIDE}"')
    if measured and not isinstance(t.get("columns"), list):
        raise ValueError('measured = "beside" goes with columns listed one by one (the recorded ones)')
    sweep = _sweep_key(t)
    axis = _axis_key(t, sweep)
    if "id" not in t or "rows" not in t or ("columns" not in t and not sweep):
        raise ValueError("a table needs id, columns and rows (a sweep table: id, sweeps or sweep, and rows)")
    columns = None if sweep else _column_specs(t["columns"])
    rows = [_row_spec(r) for r in t["rows"]]
    lanes = t.get("lanes", "columns")
    if lanes not in ("columns", "rows"):
        raise ValueError('lanes must be "columns" or "rows"')
    return TableSpec(
        id=str(t["id"]),
        title=str(t.get("title", t["id"])),
        columns=columns,
        rows=tuple(rows),
        corner=str(t.get("corner", "measure")),
        lanes=lanes,
        source=t.get("source"),
        drop_empty_rows=bool(t.get("drop_empty_rows", False)),
        empty=str(t.get("empty", "No runs.")),
        notes=tuple(str(n) for n in t.get("notes", [])),
        interval=_interval(t.get("interval", "range"), "table"),
        sweep=sweep,
        sweep_points=bool(t.get("sweep_points", True)),
        axis=axis,
        measured=measured,
    )


def _axis_key(t: dict[str, Any], sweep: str) -> str:
    """Which axis the table has (`axis = "depth"`, or TOOLS for `tools = "auto"`), "" for none; an axis table
    has its lanes as rows, so it takes no `lanes` and is no sweep table."""
    if "axis" in t and TOOLS in t:
        raise ValueError(f"a table is an axis table or the {TOOLS} table, not both")
    if TOOLS in t:
        if t[TOOLS] != TOOLS_AUTO:
            raise ValueError(f'{TOOLS} = {t[TOOLS]!r}: only "auto"')
        axis = TOOLS
    elif "axis" in t:
        axis = t["axis"]
        if axis not in AXES:
            choices = "; ".join(f'"{name}": {what}' for name, what in AXES.items())
            raise ValueError(f"axis = {axis!r}: one of {choices}")
    else:
        return ""
    if sweep:
        raise ValueError(f"a table is a sweep table or a {axis} table, not both")
    if "lanes" in t:
        raise ValueError(f"a {axis} table takes no lanes (its lanes and {axis} are its rows)")
    return axis


def _sweep_key(t: dict[str, Any]) -> str:
    """SWEEPS_AUTO for `sweeps = "auto"`, "<recipe>/<name>" for `sweep = ...`, "" for a lane table."""
    if "sweeps" in t and "sweep" in t:
        raise ValueError('a table takes sweeps = "auto" or sweep = "<recipe>/<name>", not both')
    if "sweeps" in t and t["sweeps"] != SWEEPS_AUTO:
        raise ValueError(
            f'sweeps = {t["sweeps"]!r}: only "auto" (name one sweep with sweep = "<recipe>/<name>")'
        )
    if "sweep" in t:
        value = t["sweep"]
        parts = value.split("/") if isinstance(value, str) else []
        if len(parts) != 2 or not all(p.strip() for p in parts):
            raise ValueError(f'sweep = {value!r}: expected "<recipe>/<name>", as under results/_sweeps/')
    if "sweeps" in t or "sweep" in t:
        extra = sorted(SWEEP_ONLY & set(t))
        if extra:
            raise ValueError(f"a sweep table takes no {', '.join(extra)} (its points are its rows)")
        return SWEEPS_AUTO if "sweeps" in t else str(t["sweep"])
    return ""
