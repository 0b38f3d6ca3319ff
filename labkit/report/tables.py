"""Comparison tables from stored runs: lanes as columns, measures as rows, every number formatted once.

Pure builders: the long-form measures DataFrame (labkit.results) -> a Table whose cells are finished
strings -> Markdown (tabulate with number parsing off, so "007" or "1e3" are never re-read) or a styled
pandas table for notebooks. Table definitions live in results/tables.toml; `labkit report` writes
results/TABLES.md and `labkit report --check` fails when the committed file no longer matches the data.

Formatting rules (measurement.md §9): median, min–max across runs with an en dash (U+2013), both ends
with the same decimals, collapsed to one value when equal; "~" for approximate figures; "(x cold)" for
the cold turn; "—" where a lane has no figure; "(sim)" on simulated lanes.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError
from labkit.recipe import read_toml

EN_DASH = "\u2013"
EM_DASH = "\u2014"  # "not measured"
MISSING = EM_DASH
TABLES_FILE = "TABLES.md"
TABLES_SPEC = "tables.toml"
FORMATS = ("number", "acceptance", "kv", "nfs", "runs")


class ReportError(LabkitError):
    """A table definition is malformed; names the file and table."""


# --------------------------------------------------------------------------------------------------
# Number formatting (pure)


def fmt_number(x: float, decimals: int = 1, thousands: bool = True) -> str:
    return f"{x:,.{decimals}f}" if thousands else f"{x:.{decimals}f}"


def fmt_range(lo: float, hi: float, decimals: int = 1, thousands: bool = True) -> str:
    """'47.8–50.7'; one value when both ends format the same."""
    a, b = fmt_number(lo, decimals, thousands), fmt_number(hi, decimals, thousands)
    return a if a == b else f"{a}{EN_DASH}{b}"


@dataclass(frozen=True)
class Stat:
    """One measure of one lane across its runs: median of run values, min/max over run values and recorded
    ranges, whether any figure was approximate, and how many runs contributed."""

    median: float | None
    lo: float | None
    hi: float | None
    approx: bool = False
    n: int = 0

    @property
    def empty(self) -> bool:
        return self.median is None and self.lo is None


def fmt_stat(stat: Stat | None, decimals: int = 1, thousands: bool = True) -> str:
    """'49.1 (47.8–50.7)', '29.7', '47.8–50.7' (a range without a median), '~750', or '—'."""
    if stat is None or stat.empty:
        return MISSING
    rng = fmt_range(stat.lo, stat.hi, decimals, thousands) if stat.lo is not None else ""
    if stat.median is None:
        text = rng
    else:
        med = fmt_number(stat.median, decimals, thousands)
        text = med if rng in ("", med) else f"{med} ({rng})"
    return ("~" + text) if stat.approx else text


def fmt_with_cold(main: Stat | None, cold: Stat | None, decimals: int = 1, thousands: bool = True) -> str:
    """'52.9 (25.5 cold)': the cold turn beside the warm figure (its own range if runs differ)."""
    text = fmt_stat(main, decimals, thousands)
    if cold is None or cold.empty:
        return text
    if cold.median is not None and cold.lo is not None:
        cold = Stat(None, cold.lo, cold.hi, cold.approx, cold.n)  # one bracket: show the cold range only
    return f"{text} ({fmt_stat(cold, decimals, thousands)} cold)"


def fmt_acceptance(accepted: Stat | None, k: Stat | None, decimals: int = 2) -> str:
    """'4.79 of 5': accepted drafts per step of K (bonus excluded), K as an integer when it is one."""
    if accepted is None or accepted.empty:
        return MISSING
    text = fmt_stat(accepted, decimals, thousands=False)
    if k is None or k.empty or k.median is None:
        return text
    kk = k.median
    return f"{text} of {int(kk) if float(kk).is_integer() else fmt_number(kk, 1, False)}"


def fmt_kv(tokens: Stat | None, context: Stat | None) -> str:
    """'8.73M tokens @131072'; '8.73M tokens (8.70–8.75M)' across differing runs; context omitted when the
    source did not state it."""
    if tokens is None or tokens.empty:
        return MISSING
    scaled = Stat(*(None if v is None else v / 1e6 for v in (tokens.median, tokens.lo, tokens.hi)),
                  tokens.approx, tokens.n)
    text = fmt_stat(scaled, 2, False)
    head, sep, tail = text.partition(" (")
    text = f"{head}M tokens{sep}{tail[:-1]}M)" if sep else f"{text}M tokens"
    if context is not None and not context.empty and context.median is not None:
        text += f" @{int(context.median)}"
    return text


def fmt_nfs(stat: Stat | None, per: str = "completion") -> str:
    """'+258 MB per short completion', '0 MB' (MB = 10^6 bytes)."""
    if stat is None or stat.empty:
        return MISSING
    scaled = Stat(*(None if v is None else v / 1e6 for v in (stat.median, stat.lo, stat.hi)), stat.approx, stat.n)
    text = fmt_stat(scaled, 0)
    if (scaled.median if scaled.median is not None else scaled.hi) == 0:
        return f"{text} MB"
    sign = "~+" if text.startswith("~") else "+"
    return f"{sign}{text.lstrip('~')} MB" + (f" per {per}" if per else "")


# --------------------------------------------------------------------------------------------------
# Table specification


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


def default_spec_file() -> Path:
    from labkit.recipe import repo_root

    return repo_root() / "results" / TABLES_SPEC


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


def _table_spec(t: dict) -> TableSpec:
    _known(t, {"id", "title", "columns", "rows", "corner", "lanes", "source", "drop_empty_rows", "empty",
               "notes"}, "table")
    if "id" not in t or "rows" not in t or "columns" not in t:
        raise ValueError("a table needs id, columns and rows")
    cols = t["columns"]
    if cols == "auto":
        columns = None
    elif isinstance(cols, list):
        columns = []
        for c in cols:
            _known(c, {"title", "recipe", "variant", "source"}, "column")
            columns.append(ColumnSpec(str(c["title"]), str(c["recipe"]), str(c["variant"]), c.get("source")))
        columns = tuple(columns)
    else:
        raise ValueError('columns must be a list of {title, recipe, variant} or "auto"')
    rows = []
    for r in t["rows"]:
        _known(r, {"label", "format", "measure", "cold", "decimals", "thousands", "per"}, "row")
        fmt = r.get("format", "number")
        if fmt not in FORMATS:
            raise ValueError(f"row {r.get('label')!r}: format {fmt!r} is not one of {', '.join(FORMATS)}")
        if fmt == "number" and not r.get("measure"):
            raise ValueError(f"row {r.get('label')!r}: a number row needs a measure")
        rows.append(RowSpec(label=str(r["label"]), format=fmt, measure=r.get("measure", ""), cold=r.get("cold", ""),
                            decimals=int(r.get("decimals", 2 if fmt == "acceptance" else 1)),
                            thousands=bool(r.get("thousands", True)), per=str(r.get("per", "completion"))))
    lanes = t.get("lanes", "columns")
    if lanes not in ("columns", "rows"):
        raise ValueError('lanes must be "columns" or "rows"')
    return TableSpec(id=str(t["id"]), title=str(t.get("title", t["id"])), columns=columns, rows=tuple(rows),
                     corner=str(t.get("corner", "measure")), lanes=lanes, source=t.get("source"),
                     drop_empty_rows=bool(t.get("drop_empty_rows", False)), empty=str(t.get("empty", "No runs.")),
                     notes=tuple(str(n) for n in t.get("notes", [])))


# --------------------------------------------------------------------------------------------------
# Building tables (pure: DataFrame in, Table out)


@dataclass
class Lane:
    title: str
    recipe: str
    variant: str
    source: str | None
    simulated: bool
    runs: int


@dataclass
class Table:
    """A finished table: `frame` holds display strings (index = row labels, columns = lane titles)."""

    id: str
    title: str
    frame: Any  # pandas.DataFrame of str
    lanes: list[Lane] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    empty: str = ""

    @property
    def sim_titles(self) -> list[str]:
        return [lane.title for lane in self.lanes if lane.simulated]


def _sim_title(title: str, simulated: bool) -> str:
    return f"{title} (sim)" if simulated and "(sim)" not in title else title


def _lane_groups(measures: Any, spec: TableSpec) -> list[tuple[Lane, Any]]:
    """(Lane, its rows of the measures frame) for each column of the table."""
    out = []
    if spec.columns is None:
        df = measures if spec.source is None else measures[measures["source"] == spec.source]
        for (recipe, variant, simulated), part in df.groupby(["recipe", "variant", "simulated"], sort=True):
            latest = part.sort_values("run").iloc[-1]
            lane = Lane(_sim_title(str(latest["label"]) or recipe, bool(simulated)), recipe, variant,
                        spec.source, bool(simulated), part["run"].nunique())
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
        out.append((Lane(_sim_title(col.title, simulated), col.recipe, col.variant, col.source, simulated,
                         part["run"].nunique()), part))
    return out


def _stat(part: Any, measure: str) -> Stat | None:
    rows = part[part["measure"] == measure]
    if not len(rows):
        return None
    values = [v for v in rows["value"].tolist() if not math.isnan(v)]
    los = [v for v in rows["min"].tolist() if not math.isnan(v)]
    his = [v for v in rows["max"].tolist() if not math.isnan(v)]
    median = _median(values) if values else None
    return Stat(median, min(los) if los else None, max(his) if his else None, bool(rows["approx"].any()),
                rows["run"].nunique())


def _median(values: list[float]) -> float:
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _expand_rows(rows: tuple[RowSpec, ...], measures: Any) -> list[RowSpec]:
    present = set(measures["measure"].unique()) if len(measures) else set()
    out = []
    for row in rows:
        if row.measure.endswith("*"):
            prefix = row.measure[:-1]
            # Only a numeric tail (the prompt length): prefill_4096, not prefill_4096_raw or _ttft.
            keys = [k for k in present if k.startswith(prefix) and k[len(prefix):].isdigit()]
            n = len(prefix)
            for key in sorted(keys, key=lambda k, n=n: int(k[n:])):
                label = row.label.replace("{P}", f"{int(key[n:]):,}")
                out.append(RowSpec(label, row.format, key, row.cold, row.decimals, row.thousands, row.per))
        else:
            out.append(row)
    return out


def cell(row: RowSpec, part: Any, lane: Lane) -> str:
    """The display string of one row for one lane."""
    if row.format == "runs":
        return str(lane.runs) if lane.runs else MISSING
    if row.format == "acceptance":
        return fmt_acceptance(_stat(part, row.measure or "accept_per_draft"), _stat(part, "accept_k"), row.decimals)
    if row.format == "kv":
        return fmt_kv(_stat(part, row.measure or "kv_pool_tokens"), _stat(part, "kv_pool_context"))
    if row.format == "nfs":
        return fmt_nfs(_stat(part, row.measure or "nfs_read_bytes_per_completion"), row.per)
    cold = _stat(part, row.cold) if row.cold else None
    return fmt_with_cold(_stat(part, row.measure), cold, row.decimals, row.thousands)


def build_table(spec: TableSpec, measures: Any) -> Table:
    """Table of display strings for one spec from the long-form measures frame."""
    import pandas as pd

    groups = _lane_groups(measures, spec)
    rows = _expand_rows(spec.rows, measures)
    grid: dict[str, list[str]] = {}
    labels = []
    for row in rows:
        values = [cell(row, part, lane) for lane, part in groups]
        if spec.drop_empty_rows and (not groups or all(v == MISSING for v in values)):
            continue
        labels.append(row.label)
        grid[row.label] = values
    titles = [lane.title for lane, _ in groups]
    frame = pd.DataFrame([grid[label] for label in labels], index=pd.Index(labels, name=spec.corner),
                         columns=titles, dtype=object)
    if spec.lanes == "rows":
        frame = frame.T
        frame.index.name = spec.corner
    return Table(id=spec.id, title=spec.title, frame=frame, lanes=[lane for lane, _ in groups],
                 notes=list(spec.notes), empty=spec.empty)


def as_list(value: str | list[str] | tuple[str, ...] | None) -> list[str] | None:
    """Notebook parameters arrive as lists or as 'a,b' strings from the command line."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value)


def build_tables(measures: Any, specs: list[TableSpec], only: list[str] | None = None,
                 recipes: list[str] | None = None) -> list[Table]:
    """All tables (or those whose id is in `only`), optionally restricted to runs of some recipes."""
    recipes, only = as_list(recipes), as_list(only)
    if recipes:
        measures = measures[measures["recipe"].isin(recipes)]
    return [build_table(spec, measures) for spec in specs if not only or spec.id in only]


# --------------------------------------------------------------------------------------------------
# Rendering


def to_markdown(table: Table) -> str:
    """GitHub Markdown for one table; cells are already strings and are not re-parsed."""
    from tabulate import tabulate

    lines = [f"## {table.title}", ""]
    frame = table.frame
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        lines.append(f"_{table.empty}_")
    else:
        data = frame.reset_index()
        headers = [str(c) for c in data.columns]
        body = [[str(v) for v in row] for row in data.itertuples(index=False)]
        colalign = ("left",) + ("right",) * (len(headers) - 1)
        lines.append(tabulate(body, headers=headers, tablefmt="pipe", disable_numparse=True,
                              colalign=colalign))
        sources = sorted({lane.source or "any" for lane in table.lanes})
        n = sum(lane.runs for lane in table.lanes)
        lines += ["", f"Runs: {n} ({', '.join(sources)})."]
    for note in table.notes:
        lines += ["", note]
    return "\n".join(lines) + "\n"


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


# --------------------------------------------------------------------------------------------------
# The `labkit report` action


@dataclass
class Report:
    markdown: str
    tables: list[Table]
    tables_path: Path
    plots: list[Path]
    skipped: list[tuple[str, str]]


def spec_path(root: str | Path, spec: str | Path | None = None) -> Path:
    """The table definitions for a results root: explicit file, else <root>/tables.toml, else the checkout's."""
    root = Path(root)
    if spec:
        return Path(spec)
    local = root / TABLES_SPEC
    return local if local.is_file() else default_spec_file()


def generate(results: str | Path | None = None, spec: str | Path | None = None, *, write: bool = True,
             plots: bool = True, out: str | Path | None = None, recipes: list[str] | None = None) -> Report:
    """Load runs, build the tables, and (write=True) write TABLES.md atomically plus PNG plots."""
    from labkit.store import atomic_write_text, load_results

    data = load_results(results)
    title, specs = load_spec(spec_path(data.root, spec))
    tables = build_tables(data.measures, specs, recipes=recipes)
    markdown = render_document(title, tables)
    target = Path(out) if out else data.root / TABLES_FILE
    made: list[Path] = []
    if write:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, markdown)
        if plots:
            from labkit.report import plots as p

            made = p.save_all(data, target.parent / "plots")  # next to the tables they illustrate
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
    diff = difflib.unified_diff(current.splitlines(keepends=True), rep.markdown.splitlines(keepends=True),
                                fromfile=f"{rep.tables_path} (committed)", tofile=f"{rep.tables_path} (regenerated)")
    return False, "".join(diff)


_PREFILL = re.compile(r"^prefill_(\d+)$")


def prefill_points(measures: Any) -> list[tuple[str, int, Stat]]:
    """(lane title, prompt tokens, Stat) for every prefill_<P> measure: the data of the prefill plot."""
    out = []
    if not len(measures):
        return out
    # recorded (lab-note) and measured figures of one lane stay apart, as in plots._lanes
    for (recipe, variant, source, simulated), part in measures.groupby(["recipe", "variant", "source", "simulated"],
                                                                       sort=True):
        title = _sim_title(str(part.sort_values("run").iloc[-1]["label"]) or recipe, bool(simulated))
        suffix = " (recorded)" if source == "recorded" else ""
        for key in sorted(part["measure"].unique()):
            m = _PREFILL.match(key)
            if m:
                stat = _stat(part, key)
                if stat is not None:
                    out.append((f"{title} [{variant}]{suffix}", int(m.group(1)), stat))
    return out
