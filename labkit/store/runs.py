"""The results store: one folder per run, written atomically, never overwritten, read back as DataFrames.

Layout: `<root>/<recipe>/<variant_id>/<run_id>/` holding
    run.json       status, provenance, plan, boot facts, summary, label, simulated flag (schema-versioned)
    requests.csv   one row per RequestRecord (measured runs only)
    engine.log     the engine log tail (optional), the executed notebook copy (optional), other raw files

A run folder is created with an exclusive mkdir and its run.json is written with status "incomplete"
before anything else, so a crash leaves a folder that says so; `finish()` flips it to "complete".
Every file is written to a temp file, fsynced and renamed into place: a reader sees the old or the new
file, never half of one. Reports read only these files, never notebook outputs.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import io
import json
import math
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit import __version__
from labkit.errors import LabkitError
from labkit.measure import RequestRecord, RunSummary

RUN_SCHEMA_VERSION = 1
RUN_FILE = "run.json"
REQUESTS_FILE = "requests.csv"
STATUSES = ("incomplete", "complete", "failed")

MEASURE_COLUMNS = ["run", "recipe", "variant", "label", "measure", "value", "min", "max", "approx",
                   "simulated", "source"]
RUN_COLUMNS = ["run", "recipe", "variant", "variants", "label", "status", "source", "simulated", "started",
               "finished", "schema_version", "n_requests", "path", "error"]


class ResultsError(LabkitError):
    """A results folder or file is unusable; names the path."""


def results_root(root: str | os.PathLike | None = None) -> Path:
    """Where runs live: the given folder, else $LABKIT_RESULTS, else the checkout's results/."""
    if root is not None:
        return Path(root)
    env = os.environ.get("LABKIT_RESULTS")
    if env:
        return Path(env)
    from labkit.recipe import repo_root

    return repo_root() / "results"


def new_run_id(now: dt.datetime | None = None) -> str:
    """Sortable and collision-resistant: UTC stamp to the second plus 6 random hex digits."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now.astimezone(dt.UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


# --------------------------------------------------------------------------------------------------
# Atomic writes


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder, fsync, rename: readers never see a partial file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress():
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


def _json_default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def dumps(data: Any) -> str:
    """Stable JSON (sorted keys, no NaN) so committed run.json files diff cleanly."""
    return json.dumps(data, indent=2, sort_keys=True, default=_json_default, allow_nan=False) + "\n"


# --------------------------------------------------------------------------------------------------
# Writing a run


def _plan_dict(plan: Any) -> dict:
    data = plan.to_dict() if hasattr(plan, "to_dict") else dict(plan)
    for key in ("recipe", "variant_id"):
        if not data.get(key):
            raise ResultsError(f"plan is missing '{key}' (pass a LanePlan or a dict with recipe and variant_id)")
    return data


def _check_segment(name: str, what: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise ResultsError(f"{what} {name!r} cannot be used as a folder name")
    return name


def _csv_value(value: Any) -> Any:
    """One CSV cell: lists and dicts (per-chunk stamps, raw usage) as JSON, so they read back exactly."""
    if value is None:
        return ""
    if isinstance(value, list | dict | tuple):
        return json.dumps(value, separators=(",", ":"))
    return value


class Run:
    """An open run folder. Use as a context manager (see ResultsStore.new_run)."""

    def __init__(self, path: Path, doc: dict):
        self.path = path
        self.doc = doc
        self.closed = False

    @property
    def run_id(self) -> str:
        return self.doc["run_id"]

    @property
    def status(self) -> str:
        return self.doc["status"]

    def _save(self) -> None:
        atomic_write_text(self.path / RUN_FILE, dumps(self.doc))

    def _check_open(self) -> None:
        if self.closed:
            raise ResultsError(f"{self.path}: run is already {self.doc['status']}; it cannot be written again")

    def write_requests(self, records: Iterable[RequestRecord | Mapping[str, Any]]) -> Path:
        """requests.csv with RequestRecord.columns() first, then any extra keys the rows carry."""
        self._check_open()
        rows = [r.to_row() if hasattr(r, "to_row") else dict(r) for r in records]
        columns = list(RequestRecord.columns())
        for row in rows:
            for key in row:
                if key not in columns:
                    columns.append(key)
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _csv_value(v) for k, v in row.items()})
        out = self.path / REQUESTS_FILE
        atomic_write_text(out, buf.getvalue())
        self.doc["n_requests"] = len(rows)
        self._files_add(REQUESTS_FILE)
        self._save()
        return out

    def write_text(self, name: str, text: str) -> Path:
        """Any side file (engine log tail, raw metrics scrape, ...), atomically."""
        self._check_open()
        out = self.path / _check_segment(name, "file name")
        atomic_write_text(out, text)
        self._files_add(name)
        self._save()
        return out

    def write_log_tail(self, text: str, name: str = "engine.log", max_lines: int = 2000) -> Path:
        lines = text.splitlines()[-max_lines:]
        return self.write_text(name, "\n".join(lines) + ("\n" if lines else ""))

    def copy_file(self, src: str | os.PathLike, name: str | None = None) -> Path:
        """Copy e.g. the executed notebook into the run folder (atomically)."""
        self._check_open()
        src = Path(src)
        name = _check_segment(name or src.name, "file name")
        atomic_write_bytes(self.path / name, src.read_bytes())
        self._files_add(name)
        self._save()
        return self.path / name

    def update(self, **fields: Any) -> None:
        """Record facts as they become known (boot facts, provenance) so a crash keeps them."""
        self._check_open()
        for key, value in fields.items():
            if key in ("run_id", "status", "schema_version"):
                raise ResultsError(f"run.json field {key!r} is managed by the store")
            self.doc[key] = value
        self._save()

    def finish(self, summary: RunSummary | Mapping[str, Any], *, boot: Mapping[str, Any] | None = None,
               provenance: Mapping[str, Any] | None = None,
               measure_info: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        """Store the summary and mark the run complete. `measure_info` adds per-measure facts a float cannot
        carry: {"decode_c1": {"min": 47.8, "max": 50.7}, "prefill_4096": {"approx": true}, ...}."""
        self._check_open()
        self.doc["summary"] = summary.to_dict() if hasattr(summary, "to_dict") else dict(summary)
        if boot is not None:
            self.doc["boot"] = dict(boot)
        if provenance is not None:
            self.doc["provenance"] = {**self.doc.get("provenance", {}), **provenance}
        if measure_info is not None:
            self.doc["measure_info"] = {k: dict(v) for k, v in measure_info.items()}
        self._list_present_files()
        self.doc["status"] = "complete"
        self.doc["finished"] = _now()
        self._save()
        self.closed = True

    def fail(self, error: str) -> None:
        if self.closed:
            return
        self._list_present_files()
        self.doc["status"] = "failed"
        self.doc["error"] = error
        self.doc["finished"] = _now()
        self._save()
        self.closed = True

    def _list_present_files(self) -> None:
        """Files others wrote into the folder (the lane's boot.json and logs/<node>.log) join the list, so
        run.json names everything the run folder holds."""
        for f in sorted(self.path.rglob("*")):
            if f.is_file() and not f.name.endswith(".tmp"):
                self._files_add(f.relative_to(self.path).as_posix())

    def _files_add(self, name: str) -> None:
        files = self.doc.setdefault("files", [])
        if name not in files:
            files.append(name)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None and not self.closed:
            reason = "interrupted" if issubclass(exc_type, KeyboardInterrupt) else f"{exc_type.__name__}: {exc}"
            try:
                self.fail(reason)
            except OSError:
                pass  # the folder stays "incomplete", which loaders flag just the same
        # Leaving without finish() or an exception keeps status "incomplete": visibly not a result.
        return False


# requests.csv columns read back as text: a nonce like "0e1234" or "0042" must not become a number.
TEXT_COLUMNS = frozenset(f.name for f in dataclasses.fields(RequestRecord) if str(f.type).startswith("str"))


class ResultsStore:
    """Creates and lists run folders under one root."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = results_root(root)

    def run_dir(self, recipe: str, variant_id: str, run_id: str) -> Path:
        return (self.root / _check_segment(recipe, "recipe") / _check_segment(variant_id, "variant id")
                / _check_segment(run_id, "run id"))

    def new_run(self, plan: Any, *, run_id: str | None = None, label: str | None = None,
                simulated: bool | None = None, source: str = "measured",
                provenance: Mapping[str, Any] | None = None, **extra: Any) -> Run:
        """Create a fresh run folder for a LanePlan (or its to_dict()) and return it, status "incomplete".

        With no run_id a new one is generated (and regenerated on a collision); an explicit run_id that
        exists raises ResultsError: a run folder is never reused or overwritten.
        """
        data = _plan_dict(plan)
        recipe, variant_id = data["recipe"], data["variant_id"]
        managed = {"schema", "schema_version", "run_id", "status", "plan", "files", "summary", "finished"}
        if managed & set(extra):
            raise ResultsError(f"run.json field(s) {', '.join(sorted(managed & set(extra)))} are managed by the store")
        parent = self.root / _check_segment(recipe, "recipe") / _check_segment(variant_id, "variant id")
        parent.mkdir(parents=True, exist_ok=True)
        for _attempt in range(5):
            rid = run_id or new_run_id()
            path = parent / _check_segment(rid, "run id")
            try:
                os.mkdir(path)  # exclusive: fails if another writer got there first
            except FileExistsError:
                if run_id:
                    raise ResultsError(f"{path}: run folder already exists; runs are never overwritten")
                continue
            break
        else:
            raise ResultsError(f"{parent}: could not allocate a fresh run id")
        doc = {
            "schema": "labkit.run",
            "schema_version": RUN_SCHEMA_VERSION,
            "run_id": rid,
            "status": "incomplete",
            "source": source,
            "recipe": recipe,
            "variant_id": variant_id,
            "variants": data.get("variants", {}),
            "label": label if label is not None else data.get("label", recipe),
            "simulated": bool(data.get("simulated", False) if simulated is None else simulated),
            "started": _now(),
            "finished": None,
            "labkit_version": __version__,
            "provenance": dict(provenance or {}),
            "plan": data,
            "boot": {},
            "summary": None,
            "files": [RUN_FILE],
            **extra,
        }
        run = Run(path, doc)
        try:
            run._save()
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)  # nothing was recorded yet: leave no empty folder
            raise
        return run

    def run_paths(self) -> list[Path]:
        """Every run folder (those with a run.json), sorted by recipe, variant, run id."""
        if not self.root.is_dir():
            return []
        return sorted(p.parent for p in self.root.glob(f"*/*/*/{RUN_FILE}"))

    def load(self, include_incomplete: bool = False) -> Results:
        return load_results(self.root, include_incomplete=include_incomplete)


def attach_file(run_dir: str | os.PathLike, src: str | os.PathLike, name: str | None = None) -> Path:
    """Add a file to a run that may already be finished: the executed notebook exists only after its last
    cell ran, i.e. after the run closed. Adds, never replaces: an existing file of that name is an error."""
    return attach_bytes(run_dir, name or Path(src).name, Path(src).read_bytes())


def attach_bytes(run_dir: str | os.PathLike, name: str, data: bytes) -> Path:
    """attach_file for bytes made in memory (a plot): written atomically and listed in run.json."""
    run_dir = Path(run_dir)
    doc = read_run(run_dir)
    name = _check_segment(name, "file name")
    target = run_dir / name
    if target.exists():
        raise ResultsError(f"{target}: already exists; run files are never overwritten")
    atomic_write_bytes(target, data)
    files = doc.setdefault("files", [])
    if name not in files:
        files.append(name)
    atomic_write_text(run_dir / RUN_FILE, dumps(doc))
    return target


# --------------------------------------------------------------------------------------------------
# Reading runs back


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
        raise ResultsError(f"{file}: schema_version {version!r} is not supported (this labkit reads "
                           f"<= {RUN_SCHEMA_VERSION})")
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
        rows.append({
            "run": doc["run_id"], "recipe": doc.get("recipe", ""), "variant": doc.get("variant_id", ""),
            "label": doc.get("label", ""), "measure": name, "value": value, "min": lo, "max": hi,
            "approx": bool(extra.get("approx", False)), "simulated": bool(doc.get("simulated", False)),
            "source": doc.get("source", "measured"),
        })
    return rows


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
            return pd.DataFrame(columns=["run", "recipe", "variant", *[c for c in RequestRecord.columns()
                                                                         if c != "run_id"]])
        return pd.concat(frames, ignore_index=True)


def load_results(root: str | os.PathLike | None = None, include_incomplete: bool = False) -> Results:
    """Read every run.json under root. Incomplete and failed runs are listed in `runs` (status column) but
    contribute no measures unless include_incomplete; unreadable folders are reported in `skipped`."""
    import pandas as pd

    store = ResultsStore(root)
    runs, measures, docs, skipped = [], [], {}, []
    for path in store.run_paths():
        try:
            doc = read_run(path)
        except ResultsError as e:
            skipped.append((str(path), str(e)))
            continue
        doc["_path"] = str(path)
        status = doc.get("status", "incomplete")
        runs.append({
            "run": doc["run_id"], "recipe": doc.get("recipe", ""), "variant": doc.get("variant_id", ""),
            "variants": json.dumps(doc.get("variants", {}), sort_keys=True), "label": doc.get("label", ""),
            "status": status, "source": doc.get("source", "measured"),
            "simulated": bool(doc.get("simulated", False)), "started": doc.get("started"),
            "finished": doc.get("finished"), "schema_version": doc.get("schema_version"),
            "n_requests": doc.get("n_requests", 0), "path": str(path), "error": doc.get("error", ""),
        })
        if status != "complete" and not include_incomplete:
            skipped.append((str(path), f"status {status}"))
            continue
        docs[doc["run_id"]] = doc
        measures.extend(measure_rows(doc))
    runs_df = pd.DataFrame(runs, columns=RUN_COLUMNS)
    measures_df = pd.DataFrame(measures, columns=MEASURE_COLUMNS)
    if len(measures_df):
        measures_df = measures_df.astype({"value": float, "min": float, "max": float, "approx": bool,
                                          "simulated": bool})
    return Results(root=store.root, runs=runs_df, measures=measures_df, docs=docs, skipped=skipped)
