"""Reading run folders back: one run.json as a dict, every run under a root as DataFrames for the report.

Incomplete and failed runs are listed (status column) but contribute no measures unless asked; unreadable
folders are reported with the reason instead of stopping the load. Reports read only these files, never
notebook outputs.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.measure import RequestRecord
from labkit.store.files import REQUESTS_FILE, RUN_FILE, RUN_SCHEMA_VERSION, ResultsError, results_root
from labkit.store.records import TEXT_COLUMNS

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


def read_run(path: str | os.PathLike) -> dict:
    """run.json of one run folder as a dict; ResultsError naming the file if it is unreadable."""
    file = Path(path) / RUN_FILE
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ResultsError(f"{file}: missing")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ResultsError(f"{file}: not valid JSON ({e})")
    if not isinstance(doc, dict) or "run_id" not in doc:
        raise ResultsError(f"{file}: not a labkit run.json (no run_id)")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > RUN_SCHEMA_VERSION:
        raise ResultsError(
            f"{file}: schema_version {version!r} is not supported (this labkit reads <= {RUN_SCHEMA_VERSION})"
        )
    return doc


def _num(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def measure_rows(doc: dict) -> list[dict]:
    """Long-form rows for one run: value is the run's figure; min/max the range it carries (a recorded range
    has no value, only min and max); approx marks figures the source gave as approximate ("~750")."""
    summary = doc.get("summary") or {}
    measures = dict(summary.get("measures") or {})
    info = doc.get("measure_info") or {}
    rows = []
    for name in sorted(set(measures) | set(info)):
        extra = info.get(name, {})
        value = _num(measures.get(name, extra.get("value")))
        lo = _num(extra.get("min", value))
        hi = _num(extra.get("max", value))
        if math.isnan(value) and math.isnan(lo) and math.isnan(hi):
            continue
        rows.append(
            {
                "run": doc["run_id"],
                "recipe": doc.get("recipe", ""),
                "variant": doc.get("variant_id", ""),
                "label": doc.get("label", ""),
                "measure": name,
                "value": value,
                "min": lo,
                "max": hi,
                "approx": bool(extra.get("approx", False)),
                "simulated": bool(doc.get("simulated", False)),
                "source": doc.get("source", "measured"),
            }
        )
    return rows


def run_row(doc: dict, path: Path) -> dict:
    """One row of the `runs` frame (RUN_COLUMNS) for a run.json read from `path`."""
    return {
        "run": doc["run_id"],
        "recipe": doc.get("recipe", ""),
        "variant": doc.get("variant_id", ""),
        "variants": json.dumps(doc.get("variants", {}), sort_keys=True),
        "label": doc.get("label", ""),
        "status": doc.get("status", "incomplete"),
        "source": doc.get("source", "measured"),
        "simulated": bool(doc.get("simulated", False)),
        "started": doc.get("started"),
        "finished": doc.get("finished"),
        "schema_version": doc.get("schema_version"),
        "n_requests": doc.get("n_requests", 0),
        "path": str(path),
        "error": doc.get("error", ""),
    }


@dataclass
class Results:
    """Runs read from a results root: `runs` (one row per run) and `measures` (long form) DataFrames;
    `requests()` reads requests.csv files on demand (they can be large)."""

    root: Path
    runs: Any  # pandas.DataFrame
    measures: Any  # pandas.DataFrame
    docs: dict[str, dict]
    skipped: list[tuple[str, str]]  # (path, reason) for unreadable or unfinished runs

    def requests(self, runs: Iterable[str] | None = None) -> Any:
        """requests.csv rows of the given run ids (all loaded runs by default), with run/recipe/variant."""
        import pandas as pd

        wanted = list(self.docs) if runs is None else list(runs)
        frames = []
        for rid in wanted:
            doc = self.docs[rid]
            file = Path(doc["_path"]) / REQUESTS_FILE
            if not file.is_file():
                continue
            df = pd.read_csv(file, dtype=dict.fromkeys(TEXT_COLUMNS, str))
            for col in TEXT_COLUMNS.intersection(df.columns):
                df[col] = df[col].fillna("")
            df.insert(0, "variant", doc.get("variant_id", ""))
            df.insert(0, "recipe", doc.get("recipe", ""))
            if "run_id" in df.columns:
                df = df.drop(columns=["run_id"])
            df.insert(0, "run", rid)
            frames.append(df)
        if not frames:
            return pd.DataFrame(
                columns=["run", "recipe", "variant", *[c for c in RequestRecord.columns() if c != "run_id"]]
            )
        return pd.concat(frames, ignore_index=True)


def load_results(root: str | os.PathLike | None = None, include_incomplete: bool = False) -> Results:
    """Read every run.json under root. Incomplete and failed runs are listed in `runs` (status column) but
    contribute no measures unless include_incomplete; unreadable folders are reported in `skipped`."""
    import pandas as pd

    root = results_root(root)
    runs, measures, docs, skipped = [], [], {}, []
    for path in run_paths(root):
        try:
            doc = read_run(path)
        except ResultsError as e:
            skipped.append((str(path), str(e)))
            continue
        doc["_path"] = str(path)
        row = run_row(doc, path)
        runs.append(row)
        if row["status"] != "complete" and not include_incomplete:
            skipped.append((str(path), f"status {row['status']}"))
            continue
        docs[doc["run_id"]] = doc
        measures.extend(measure_rows(doc))
    runs_df = pd.DataFrame(runs, columns=RUN_COLUMNS)
    measures_df = pd.DataFrame(measures, columns=MEASURE_COLUMNS)
    if len(measures_df):
        measures_df = measures_df.astype(
            {"value": float, "min": float, "max": float, "approx": bool, "simulated": bool}
        )
    return Results(root=root, runs=runs_df, measures=measures_df, docs=docs, skipped=skipped)
