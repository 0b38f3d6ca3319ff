"""Table definitions: results/tables.toml in, validated TableSpecs out (which lanes are columns, which
measures are rows and how each row is formatted). Bad input raises ReportError naming the file and table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from labkit.errors import LabkitError
from labkit.recipe import read_toml

TABLES_SPEC = "tables.toml"
FORMATS = ("number", "acceptance", "kv", "nfs", "runs")
# Cell forms of number rows: "range" (median and min–max, the default), "pm" ("49.1 ± 1.2"), "ci"
# ("49.1 [47.9, 50.3]"); docs/measurement.md, "Intervals over runs".
INTERVALS = ("range", "pm", "ci")


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

    def interval_of(self, row: RowSpec) -> str:
        """The cell form of one row: its own interval, else the table's; only number rows have one."""
        return (row.interval or self.interval) if row.format == "number" else "range"


def default_spec_file() -> Path:
    from labkit.recipe import repo_root

    return repo_root() / "results" / TABLES_SPEC


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
            spec = _table_spec(t)
        except (KeyError, TypeError, ValueError) as e:
            raise ReportError(f"{where}: {e}")
        if spec.id in seen:
            raise ReportError(f"{where}: duplicate id {spec.id!r}")
        seen.add(spec.id)
        tables.append(spec)
    return str(data.get("title", "Comparison tables")), tables


def _known(d: dict, allowed: set[str], what: str) -> None:
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


def _row_spec(r: dict) -> RowSpec:
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
        label=str(r["label"]),
        format=fmt,
        measure=r.get("measure", ""),
        cold=r.get("cold", ""),
        decimals=int(r.get("decimals", 2 if fmt == "acceptance" else 1)),
        thousands=bool(r.get("thousands", True)),
        per=str(r.get("per", "completion")),
        interval=interval,
    )


def _table_spec(t: dict) -> TableSpec:
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
        },
        "table",
    )
    if "id" not in t or "rows" not in t or "columns" not in t:
        raise ValueError("a table needs id, columns and rows")
    columns = _column_specs(t["columns"])
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
    )
