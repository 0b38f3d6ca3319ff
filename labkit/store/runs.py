"""The results store: one folder per run, written atomically, never overwritten.

Layout: `<root>/<recipe>/<variant_id>/<run_id>/` holding
    run.json       status, provenance, plan, boot facts, summary, label, simulated flag (schema-versioned)
    requests.csv   one row per RequestRecord (measured runs only)
    chunks.csv.gz  every request's chunk_t/chunk_n, gzip'd CSV keyed by row and response id (schema >= 2)
    engine.log     the engine log tail (optional), the executed notebook copy (optional), other raw files

A run folder is created with an exclusive mkdir and its run.json is written with status "incomplete"
before anything else, so a crash leaves a folder that says so; `finish()` flips it to "complete".
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from labkit import __version__
from labkit.measure import RequestRecord, RunSummary
from labkit.store.chunks import CHUNK_COLUMNS, split_chunks
from labkit.store.files import (
    CHUNKS_FILE,
    ENGINE_LOG_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    RUN_SCHEMA_VERSION,
    ResultsError,
    atomic_write_bytes,
    atomic_write_text,
    check_segment,
    dumps,
    now_iso,
    results_root,
)
from labkit.store.load import Results, load_results, read_doc, run_paths
from labkit.store.records import requests_csv
from labkit.store.storedrun import RunSource, RunStatus, parse_run


def new_run_id(now: dt.datetime | None = None) -> str:
    """Sortable and collision-resistant: UTC stamp to the second plus 6 random hex digits."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{now.astimezone(dt.UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def _plan_dict(plan: Any) -> dict[str, Any]:
    data = plan.to_dict() if hasattr(plan, "to_dict") else dict(plan)
    for key in ("recipe", "variant_id"):
        if not data.get(key):
            raise ResultsError(
                f"plan is missing '{key}' (pass a LanePlan or a dict with recipe and variant_id)"
            )
    return data


class Run:
    """An open run folder. Use as a context manager (see ResultsStore.new_run)."""

    def __init__(self, path: Path, doc: dict[str, Any]):
        self.path = path
        self.doc = doc
        self.closed = False

    @property
    def run_id(self) -> str:
        return str(self.doc["run_id"])

    @property
    def status(self) -> RunStatus:
        status: RunStatus = self.doc["status"]
        return status

    def _save(self) -> None:
        """Write run.json as it stands now (atomically)."""
        atomic_write_text(self.path / RUN_FILE, dumps(self.doc))

    def _check_open(self) -> None:
        if self.closed:
            raise ResultsError(
                f"{self.path}: run is already {self.doc['status']}; it cannot be written again"
            )

    def write_requests(self, records: Iterable[RequestRecord | Mapping[str, Any]]) -> Path:
        """requests.csv with RequestRecord.columns() first (chunk_t/chunk_n aside), then any extra keys the
        rows carry; the chunk lists into chunks.csv.gz. The chunk file is written first, each file atomically:
        a crash between the two leaves it a superset of requests.csv's rows, which readers accept."""
        self._check_open()
        rows = [r.to_row() if hasattr(r, "to_row") else dict(r) for r in records]
        atomic_write_bytes(self.path / CHUNKS_FILE, split_chunks(rows))
        self._files_add(CHUNKS_FILE)
        text, n = requests_csv(rows, skip=CHUNK_COLUMNS)
        out = self.path / REQUESTS_FILE
        atomic_write_text(out, text)
        self.doc["n_requests"] = n
        self._files_add(REQUESTS_FILE)
        self._save()
        return out

    def write_text(self, name: str, text: str) -> Path:
        """Any side file (engine log tail, raw metrics scrape, ...), atomically."""
        self._check_open()
        out = self.path / check_segment(name, "file name")
        atomic_write_text(out, text)
        self._files_add(name)
        self._save()
        return out

    def write_log_tail(self, text: str, name: str = ENGINE_LOG_FILE, max_lines: int = 2000) -> Path:
        lines = text.splitlines()[-max_lines:]
        return self.write_text(name, "\n".join(lines) + ("\n" if lines else ""))

    def copy_file(self, src: str | os.PathLike[str], name: str | None = None) -> Path:
        """Copy e.g. the executed notebook into the run folder (atomically)."""
        self._check_open()
        src = Path(src)
        name = check_segment(name or src.name, "file name")
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

    def finish(
        self,
        summary: RunSummary | Mapping[str, Any],
        *,
        boot: Mapping[str, Any] | None = None,
        provenance: Mapping[str, Any] | None = None,
        measure_info: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
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
        self.doc["finished"] = now_iso()
        self._save()
        self.closed = True

    def fail(self, error: str) -> None:
        if self.closed:
            return
        self._list_present_files()
        self.doc["status"] = "failed"
        self.doc["error"] = error
        self.doc["finished"] = now_iso()
        self._save()
        self.closed = True

    def _list_present_files(self) -> None:
        """Files written beside run.json (the lane's boot.json and logs/<node>.log) join the list, so
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

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if exc_type is not None and not self.closed:
            reason = (
                "interrupted" if issubclass(exc_type, KeyboardInterrupt) else f"{exc_type.__name__}: {exc}"
            )
            try:
                self.fail(reason)
            except OSError:
                pass  # the folder stays "incomplete", which loaders flag just the same
        # Leaving without finish() or an exception keeps status "incomplete": visibly not a result.
        return False


# run.json fields new_run() sets itself; callers' extra fields may not name them.
MANAGED_FIELDS = {"schema", "schema_version", "run_id", "status", "plan", "files", "summary", "finished"}


class ResultsStore:
    """Creates and lists run folders under one root."""

    def __init__(self, root: str | os.PathLike[str] | None = None):
        self.root = results_root(root)

    def run_dir(self, recipe: str, variant_id: str, run_id: str) -> Path:
        return (
            self.root
            / check_segment(recipe, "recipe")
            / check_segment(variant_id, "variant id")
            / check_segment(run_id, "run id")
        )

    def run_folders(self) -> list[Path]:
        """Every run folder under the root (those holding a run.json), sorted by recipe, variant, run id."""
        return run_paths(self.root)

    def find(self, run_id: str) -> list[Path]:
        """Every folder of this run id under the root, whatever its recipe and variant (a run id is meant to
        be unique: more than one is the caller's to report)."""
        check_segment(run_id, "run id")
        if not self.root.is_dir():
            return []
        return sorted(p.parent for p in self.root.glob(f"*/*/{run_id}/{RUN_FILE}"))

    def new_run(
        self,
        plan: Any,
        *,
        run_id: str | None = None,
        label: str | None = None,
        simulated: bool | None = None,
        source: RunSource = "measured",
        provenance: Mapping[str, Any] | None = None,
        **extra: Any,
    ) -> Run:
        """Create a fresh run folder for a LanePlan (or its to_dict()) and return it, status "incomplete".

        With no run_id a new one is generated (and regenerated on a collision); an explicit run_id that
        exists raises ResultsError: a run folder is never reused or overwritten.
        """
        data = _plan_dict(plan)
        recipe, variant_id = data["recipe"], data["variant_id"]
        if MANAGED_FIELDS & set(extra):
            raise ResultsError(
                f"run.json field(s) {', '.join(sorted(MANAGED_FIELDS & set(extra)))} are managed by the store"
            )
        parent = self.root / check_segment(recipe, "recipe") / check_segment(variant_id, "variant id")
        parent.mkdir(parents=True, exist_ok=True)
        path = self._make_folder(parent, run_id)
        doc = {
            "schema": "labkit.run",
            "schema_version": RUN_SCHEMA_VERSION,
            "run_id": path.name,
            "status": "incomplete",
            "source": source,
            "recipe": recipe,
            "variant_id": variant_id,
            "variants": data.get("variants", {}),
            "label": label if label is not None else data.get("label", recipe),
            "simulated": bool(data.get("simulated", False) if simulated is None else simulated),
            "started": now_iso(),
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

    @staticmethod
    def _make_folder(parent: Path, run_id: str | None) -> Path:
        """Create the run folder exclusively: a given run_id must be new; a generated one is retried."""
        for _attempt in range(5):
            rid = run_id or new_run_id()
            path = parent / check_segment(rid, "run id")
            try:
                os.mkdir(path)  # exclusive: fails if another writer got there first
            except FileExistsError:
                if run_id:
                    raise ResultsError(f"{path}: run folder already exists; runs are never overwritten")
                continue
            return path
        raise ResultsError(f"{parent}: could not allocate a fresh run id")

    def run_paths(self) -> list[Path]:
        """Every run folder (those with a run.json), sorted by recipe, variant, run id."""
        return run_paths(self.root)

    def load(self, include_incomplete: bool = False) -> Results:
        return load_results(self.root, include_incomplete=include_incomplete)


# what `refresh_run` may rewrite in a finished run.json: what was derived from a kept original, never the raw
# files, the plan, the boot or when the run was measured
REFRESHABLE = frozenset({"summary", "measure_info", "imported"})


def refresh_run(path: str | os.PathLike[str], changes: Mapping[str, Any], why: str) -> None:
    """The one way a finished run.json changes: parts derived from a file the run keeps (REFRESHABLE) read again
    by a newer labkit, written atomically, with when, by which labkit and why appended to its `refreshed` list.
    ResultsError (nothing written) for a run that is not complete or a part that is not refreshable."""
    folder = Path(path)
    doc = read_doc(folder)
    if doc.get("status") != "complete":
        raise ResultsError(f"{folder}: only a complete run is refreshed (status {doc.get('status')!r})")
    bad = sorted(set(changes) - REFRESHABLE)
    if bad:
        raise ResultsError(f"{folder}: {', '.join(bad)} of a stored run are never rewritten")
    doc.update(changes)
    doc.setdefault("refreshed", []).append({"at": now_iso(), "labkit_version": __version__, "why": why})
    parse_run(doc, folder)  # what is written must read back
    atomic_write_text(folder / RUN_FILE, dumps(doc))


def attach_file(
    run_dir: str | os.PathLike[str], src: str | os.PathLike[str], name: str | None = None
) -> Path:
    """Add a file to a run that may already be finished: the executed notebook exists only after its last
    cell ran, i.e. after the run closed. Adds, never replaces: an existing file of that name is an error."""
    return attach_bytes(run_dir, name or Path(src).name, Path(src).read_bytes())


def attach_bytes(run_dir: str | os.PathLike[str], name: str, data: bytes) -> Path:
    """attach_file for bytes made in memory (a plot): written atomically and listed in run.json."""
    run_dir = Path(run_dir)
    doc = read_doc(run_dir)
    parse_run(doc, run_dir)  # a folder that is no readable run is refused before anything is added
    name = check_segment(name, "file name")
    target = run_dir / name
    if target.exists():
        raise ResultsError(f"{target}: already exists; run files are never overwritten")
    atomic_write_bytes(target, data)
    files = doc.setdefault("files", [])
    if name not in files:
        files.append(name)
    atomic_write_text(run_dir / RUN_FILE, dumps(doc))
    return target
