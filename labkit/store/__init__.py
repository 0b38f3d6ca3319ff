"""Step 5, store: a plan and its records in, `results/<recipe>/<variant>/<run-id>/` out (run.json with
provenance, raw samples as CSV/JSON); loading reads every run folder back into tables for the report.

files.py: where results live, the names in a run folder, atomic writes; runfiles.py: a bench result's raw
files, the lane's boot facts and node logs (RunFolderSink), telemetry CSVs read back; records.py: requests.csv; runs.py: the run folder and
ResultsStore; storedrun.py: run.json parsed once into a frozen StoredRun (summary, flags, per-measure facts,
recorded and imported marks), runparts.py: its typed plan, provenance and boot facts and the key-by-key reader;
load.py: run folders back as StoredRuns and DataFrames; recorded.py: lab-note figures imported as runs;
baselines.py: per-node healthy SM-clock baselines under results/_baselines/; sweeps.py: sweep records under
results/_sweeps/ (which runs make each point of a sweep).
"""

from labkit.store.baselines import read_baselines, read_canary, update_baselines, update_canary
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
from labkit.store.runs import ResultsStore, Run, attach_bytes, attach_file
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
    "results_root",
    "sweep_path",
    "telemetry_rows",
    "tool_label",
    "update_baselines",
    "update_canary",
    "write_result",
    "write_staging",
    "write_sweep",
]
