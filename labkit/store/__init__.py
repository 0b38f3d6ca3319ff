"""Step 5, store: a plan and its records in, `results/<recipe>/<variant>/<run-id>/` out (run.json with
provenance, raw samples as CSV/JSON); loading reads every run folder back into tables for the report.

Its modules, each with what it is for: docs/architecture.md, "Packages" (generated from their docstrings).
"""

from labkit.store.baselines import read_baselines, read_canary, update_baselines, update_canary
from labkit.store.chunks import with_chunks
from labkit.store.files import (
    IMPORT_SOURCE,
    NOTEBOOK_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    UNKNOWN,
    ResultsError,
    atomic_write_text,
    results_root,
    tool_label,
)
from labkit.store.load import load_results, measure_rows, read_run
from labkit.store.recorded import import_figures
from labkit.store.runfiles import RunFolderSink, read_telemetry, telemetry_rows, write_result, write_staging
from labkit.store.runparts import StoredBoot, StoredPlan
from labkit.store.runs import ResultsStore, Run, attach_bytes, attach_file, refresh_run
from labkit.store.storedrun import MeasureInfo, RunFlag, StoredRun
from labkit.store.sweeps import (
    SweepAxisRecord,
    SweepPoint,
    SweepRecord,
    load_sweeps,
    read_sweep,
    sweep_path,
    write_sweep,
)

__all__ = [
    "IMPORT_SOURCE",
    "NOTEBOOK_FILE",
    "REQUESTS_FILE",
    "RUN_FILE",
    "UNKNOWN",
    "MeasureInfo",
    "ResultsError",
    "ResultsStore",
    "Run",
    "RunFlag",
    "RunFolderSink",
    "StoredBoot",
    "StoredPlan",
    "StoredRun",
    "SweepAxisRecord",
    "SweepPoint",
    "SweepRecord",
    "atomic_write_text",
    "attach_bytes",
    "attach_file",
    "import_figures",
    "load_results",
    "load_sweeps",
    "measure_rows",
    "read_baselines",
    "read_canary",
    "read_run",
    "read_sweep",
    "read_telemetry",
    "refresh_run",
    "results_root",
    "sweep_path",
    "telemetry_rows",
    "tool_label",
    "update_baselines",
    "update_canary",
    "with_chunks",
    "write_result",
    "write_staging",
    "write_sweep",
]
