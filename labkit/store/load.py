"""Reading run folders back: one run.json as a StoredRun, every run under a root as DataFrames for the report.

Incomplete and failed runs are listed (status column) but contribute no measures unless asked; unreadable
folders are reported with the reason instead of stopping the load. Reports read only these files, never
notebook outputs.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.measure import RequestRecord
from labkit.store.chunks import chunks_apart, read_chunk_cells, with_chunks
from labkit.store.files import CHUNKS_FILE, REQUESTS_FILE, RUN_FILE, STAGING_FILE, ResultsError, results_root
from labkit.store.records import TEXT_COLUMNS
from labkit.store.storedrun import MeasureInfo, StoredRun, parse_run

MEASURE_COLUMNS = [
    "run",
    "recipe",
    "variant",
    "label",
    "measure",
    "value",
    "min",
    "max",
    "approx",
    "simulated",
    "source",
]
RUN_COLUMNS = [
    "run",
    "recipe",
    "variant",
    "variants",
    "label",
    "status",
    "source",
    "simulated",
    "started",
    "finished",
    "schema_version",
    "n_requests",
    "path",
    "error",
]


def run_paths(root: Path) -> list[Path]:
    """Every run folder (those with a run.json) under root, sorted by recipe, variant, run id."""
    if not root.is_dir():
        return []
    return sorted(p.parent for p in root.glob(f"*/*/*/{RUN_FILE}"))


def read_doc(path: str | os.PathLike[str]) -> Any:
    """run.json of one run folder as parsed JSON, unchecked: for the store's own rewrites of it."""
    file = Path(path) / RUN_FILE
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{file}: missing")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ResultsError(f"{file}: not valid JSON ({e})")


def read_run(path: str | os.PathLike[str]) -> StoredRun:
    """run.json of one run folder, parsed once; ResultsError naming the file (and key) if it is unreadable,
    of a newer schema, or malformed."""
    return parse_run(read_doc(path), Path(path))


def _num(value: float | None) -> float:
    return math.nan if value is None else value


def measure_rows(run: StoredRun) -> list[dict[str, Any]]:
    """Long-form rows for one run: value is the run's figure; min/max the range it carries (a recorded range
    has no value, only min and max); approx marks figures the source gave as approximate ("~750")."""
    measures, info = run.summary.measures, run.measure_info
    rows = []
    for name in sorted(set(measures) | set(info)):
        extra = info.get(name, MeasureInfo())
        value = _num(measures.get(name, extra.value))
        lo = _num(extra.min if "min" in extra.raw else value)
        hi = _num(extra.max if "max" in extra.raw else value)
        if math.isnan(value) and math.isnan(lo) and math.isnan(hi):
            continue
        rows.append(_row(run, name, value, lo, hi, extra.approx))
    return rows


def _row(run: StoredRun, name: str, value: float, lo: float, hi: float, approx: bool) -> dict[str, Any]:
    """One row of the long `measures` frame (MEASURE_COLUMNS)."""
    return {
        "run": run.run_id,
        "recipe": run.recipe,
        "variant": run.variant_id,
        "label": run.label,
        "measure": name,
        "value": value,
        "min": lo,
        "max": hi,
        "approx": approx,
        "simulated": run.simulated,
        "source": run.source,
    }


def lane_rows(run: StoredRun) -> list[dict[str, Any]]:
    """The lane's own timings as measure rows: `boot_s` from the boot facts and `staging_s` from staging.json,
    on the run that booted the lane (a later run on the same boot repeats its boot facts, not the boot)."""
    if run.boot_run not in (None, run.run_id):
        return []
    found: dict[str, float] = {}
    boot = run.boot.raw.get("boot_seconds")
    if isinstance(boot, int | float) and not isinstance(boot, bool):
        found["boot_s"] = float(boot)
    if STAGING_FILE in run.files:
        try:
            staged = json.loads((run.path / STAGING_FILE).read_text(encoding="utf-8")).get("seconds")
        except (OSError, ValueError, AttributeError):
            staged = None
        if isinstance(staged, int | float) and not isinstance(staged, bool):
            found["staging_s"] = float(staged)
    return [
        _row(run, name, value, value, value, False)
        for name, value in found.items()
        if name not in run.summary.measures
    ]


def run_row(run: StoredRun) -> dict[str, Any]:
    """One row of the `runs` frame (RUN_COLUMNS)."""
    return {
        "run": run.run_id,
        "recipe": run.recipe,
        "variant": run.variant_id,
        "variants": json.dumps(dict(run.variants), sort_keys=True),
        "label": run.label,
        "status": run.status,
        "source": run.source,
        "simulated": run.simulated,
        "started": run.started,
        "finished": run.finished,
        "schema_version": run.schema_version,
        "n_requests": run.n_requests,
        "path": str(run.path),
        "error": run.error,
    }


@dataclass
class Results:
    """Runs read from a results root: `runs` (one row per run) and `measures` (long form) DataFrames;
    `requests()` reads requests.csv files on demand (they can be large)."""

    root: Path
    runs: Any  # pandas.DataFrame
    measures: Any  # pandas.DataFrame
    docs: dict[str, StoredRun]  # run id -> the run, parsed
    skipped: list[tuple[str, str]]  # (path, reason) for unreadable or unfinished runs

    def wide(self, measures: Iterable[str] | None = None) -> Any:
        """One row per loaded run: what it was (lane, variant axes and swept keys, source, date, image,
        versions), then each measure (`measures`: only these) as a column (labkit/store/wide.py)."""
        from labkit.store.wide import wide_frame

        return wide_frame(list(self.docs.values()), self.measures, measures)

    def requests(self, runs: Iterable[str] | None = None, chunks: bool = True) -> Any:
        """requests.csv rows of the given run ids (all loaded runs by default), with run/recipe/variant; with
        `chunks`, chunk_t/chunk_n as JSON text whichever file of the run holds them (store/chunks.py), without,
        a run of schema >= 2 skips reading its chunk file (an older one's columns stay: they are in the CSV)."""
        import pandas as pd

        wanted = list(self.docs) if runs is None else list(runs)
        frames = []
        for rid in wanted:
            run = self.docs[rid]
            file = run.path / REQUESTS_FILE
            if not file.is_file():
                continue
            df = pd.read_csv(file, dtype=dict.fromkeys(TEXT_COLUMNS, str))
            for col in TEXT_COLUMNS.intersection(df.columns):
                df[col] = df[col].fillna("")
            if chunks:
                df = with_chunks(df, run.path, run.schema_version)
            df.insert(0, "variant", run.variant_id)
            df.insert(0, "recipe", run.recipe)
            if "run_id" in df.columns:
                df = df.drop(columns=["run_id"])
            df.insert(0, "run", rid)
            frames.append(df)
        if not frames:
            return pd.DataFrame(
                columns=["run", "recipe", "variant", *[c for c in RequestRecord.columns() if c != "run_id"]]
            )
        return pd.concat(frames, ignore_index=True)


def _cell(kind: str, text: str) -> Any:
    """One requests.csv cell back to its RequestRecord type (`kind`, the field's annotation), as
    records.csv_value wrote it: "" is None where the field may be None, lists and dicts are JSON."""
    if text == "" and "None" in kind:
        return None
    base = kind.split(" | ")[0]
    if base == "bool":
        return text == "True"
    if base in ("int", "float"):
        return int(text) if base == "int" else float(text)
    if base.startswith(("dict", "list")):
        return json.loads(text)
    return text


def read_records(run: StoredRun) -> list[RequestRecord]:
    """The run's requests back as RequestRecords, equal to those written (chunk lists included, from the
    chunk file since run schema 2); columns this labkit does not know are left out. ResultsError naming the
    file when a cell does not read as its field's type."""
    file = run.path / REQUESTS_FILE
    kinds = {f.name: str(f.type) for f in dataclasses.fields(RequestRecord)}
    with open(file, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if chunks_apart(run.schema_version) and rows and "chunk_t" not in rows[0]:
        cells = read_chunk_cells(run.path / CHUNKS_FILE, [r.get("response_id") or "" for r in rows])
        for i, row in enumerate(rows):
            row.update({c: cells[c][i] for c in cells})
    out = []
    for i, row in enumerate(rows):
        try:
            out.append(RequestRecord(**{k: _cell(kinds[k], v) for k, v in row.items() if k in kinds}))
        except (TypeError, ValueError) as e:
            raise ResultsError(f"{file}: row {i}: {e}") from None
    return out


def load_results(root: str | os.PathLike[str] | None = None, include_incomplete: bool = False) -> Results:
    """Read every run.json under root. Incomplete and failed runs are listed in `runs` (status column) but
    contribute no measures unless include_incomplete; unreadable folders are reported in `skipped`."""
    import pandas as pd

    root = results_root(root)
    runs, measures, docs, skipped = [], [], {}, []
    for path in run_paths(root):
        try:
            run = read_run(path)
        except ResultsError as e:
            skipped.append((str(path), str(e)))
            continue
        runs.append(run_row(run))
        if run.status != "complete" and not include_incomplete:
            skipped.append((str(path), f"status {run.status}"))
            continue
        docs[run.run_id] = run
        measures.extend(measure_rows(run) + lane_rows(run))
    runs_df = pd.DataFrame(runs, columns=RUN_COLUMNS)
    measures_df = pd.DataFrame(measures, columns=MEASURE_COLUMNS)
    if len(measures_df):
        measures_df = measures_df.astype(
            {"value": float, "min": float, "max": float, "approx": bool, "simulated": bool}
        )
    return Results(root=root, runs=runs_df, measures=measures_df, docs=docs, skipped=skipped)
