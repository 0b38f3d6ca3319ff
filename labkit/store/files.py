"""The results folder on disk: where it is, the names in a run folder, and writes a reader never sees half of.

Every file is written to a temp file in the same folder, fsynced and renamed into place: a reader sees the
old or the new file, never half of one. JSON is written with sorted keys and no NaN so committed run.json
files diff cleanly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Final

from labkit import settings
from labkit.errors import LabkitError

# 2: chunk_t/chunk_n of every request in chunks.csv.gz, no longer in requests.csv (store/chunks.py)
RUN_SCHEMA_VERSION = 3  # 3: boot facts gain the device probe (`boot.probe`); 2 still reads
CHUNKS_SINCE = 2  # the first run schema with the chunk file
# run.json `source` of a run made from another tool's file (labkit/exchange, docs/imports.md)
IMPORT_SOURCE: Final = "import"
UNKNOWN = "unknown"  # provenance an imported file does not carry: never guessed


def tool_label(tool: str, version: str) -> str:
    """An imported run's tool and version as every table and message words them: "llama-benchy 0.4.0",
    "vllm bench serve, version unknown"."""
    return f"{tool} {version}" if version != UNKNOWN else f"{tool}, version unknown"


# The names in a run folder (docs/architecture.md, "The run folder"): only store code writes or reads them.
RUN_FILE = "run.json"
REQUESTS_FILE = "requests.csv"
CHUNKS_FILE = "chunks.csv.gz"  # per-chunk stamps of every request, since run schema 2 (store/chunks.py)
GROUPS_FILE = "groups.csv"
SCRAPES_FILE = "metrics.json"  # the raw /metrics scrapes around the windows
IO_FILE = "io.json"
STAGING_FILE = "staging.json"
BOOT_FILE = "boot.json"
LOGS_DIR = "logs"  # logs/<node>.log, each node's engine log as the lane saw it
ENGINE_LOG_FILE = "engine.log"
NOTEBOOK_FILE = "bench.ipynb"  # the executed bench notebook's copy
TELEMETRY_PREFIX, TELEMETRY_SUFFIX = "telemetry-", ".csv"  # telemetry-<node>.csv, a node's raw samples


def node_log_name(node: str) -> str:
    """logs/<node>.log, relative to the run folder."""
    return f"{LOGS_DIR}/{node}.log"


def telemetry_name(node: str) -> str:
    """telemetry-<node>.csv."""
    return TELEMETRY_PREFIX + node + TELEMETRY_SUFFIX


class ResultsError(LabkitError):
    """A results folder or file is unusable; names the path."""


def results_root(root: str | os.PathLike[str] | None = None) -> Path:
    """Where runs live: the given folder, else $LABKIT_RESULTS, else the working directory's checkout's
    results/, else the installed checkout's (labkit.recipe.checkout)."""
    if root is not None:
        return Path(root)
    env = settings.current().results
    if env:
        return Path(env)
    from labkit.recipe import checkout

    return checkout() / "results"


def check_segment(name: str, what: str) -> str:
    """`name` if it can be one folder or file name inside a run folder; ResultsError otherwise."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise ResultsError(f"{what} {name!r} cannot be used as a folder name")
    return name


def now_iso() -> str:
    """The current UTC time to the second, as run.json stores it."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


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
        with contextlib.suppress(OSError):
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
