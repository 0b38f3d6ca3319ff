"""Step 5, store: a plan and its records in, `results/<recipe>/<variant>/<run-id>/` out (run.json with
provenance, raw samples as CSV/JSON); loading reads every run folder back into tables for the report.

files.py: where results live, the names in a run folder, atomic writes; runfiles.py: a bench result's raw
files, the lane's boot facts and node logs (RunFolderSink), telemetry CSVs read back; records.py: requests.csv; runs.py: the run folder and
ResultsStore; load.py: run folders back to DataFrames; recorded.py: lab-note figures imported as runs;
baselines.py: per-node healthy SM-clock baselines under results/_baselines/; sweeps.py: sweep records under
results/_sweeps/ (which runs make each point of a sweep).
"""

from labkit.store.baselines import KEEP as KEEP_BASELINE_RUNS
from labkit.store.baselines import read_baselines, update_baselines
from labkit.store.files import (
    BOOT_FILE,
    ENGINE_LOG_FILE,
    GROUPS_FILE,
    IO_FILE,
    LOGS_DIR,
    NOTEBOOK_FILE,
    REQUESTS_FILE,
    RUN_FILE,
    RUN_SCHEMA_VERSION,
    SCRAPES_FILE,
    STAGING_FILE,
    ResultsError,
    atomic_write_bytes,
    atomic_write_text,
    node_log_name,
    results_root,
    telemetry_name,
)
from labkit.store.load import MEASURE_COLUMNS, RUN_COLUMNS, Results, load_results, measure_rows, read_run
from labkit.store.recorded import RecordedError, import_figures, parse_figures
from labkit.store.runfiles import (
    RunFolderSink,
    read_telemetry,
    telemetry_rows,
    write_boot,
    write_result,
    write_staging,
)
from labkit.store.runs import ResultsStore, Run, attach_bytes, attach_file, new_run_id
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
    "BOOT_FILE",
    "ENGINE_LOG_FILE",
    "GROUPS_FILE",
    "IO_FILE",
    "LOGS_DIR",
    "NOTEBOOK_FILE",
    "SCRAPES_FILE",
    "STAGING_FILE",
    "RunFolderSink",
    "node_log_name",
    "read_telemetry",
    "telemetry_name",
    "telemetry_rows",
    "write_boot",
    "write_result",
    "write_staging",
    "KEEP_BASELINE_RUNS",
    "read_baselines",
    "update_baselines",
    "MEASURE_COLUMNS",
    "REQUESTS_FILE",
    "RUN_COLUMNS",
    "RUN_FILE",
    "RUN_SCHEMA_VERSION",
    "RecordedError",
    "Results",
    "ResultsError",
    "ResultsStore",
    "Run",
    "atomic_write_bytes",
    "atomic_write_text",
    "attach_bytes",
    "attach_file",
    "import_figures",
    "load_results",
    "measure_rows",
    "new_run_id",
    "parse_figures",
    "read_run",
    "results_root",
    "SweepAxisRecord",
    "SweepPoint",
    "SweepRecord",
    "load_sweeps",
    "read_sweep",
    "sweep_path",
    "write_sweep",
]
