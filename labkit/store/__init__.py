"""Step 5, store: a plan and its records in, `results/<recipe>/<variant>/<run-id>/` out (run.json with
provenance, raw samples as CSV/JSON); loading reads every run folder back into tables for the report.

files.py: where results live, atomic writes; records.py: requests.csv; runs.py: the run folder and
ResultsStore; load.py: run folders back to DataFrames; recorded.py: lab-note figures imported as runs;
baselines.py: per-node healthy SM-clock baselines under results/_baselines/; sweeps.py: sweep records under
results/_sweeps/ (which runs make each point of a sweep).
"""

from labkit.store.baselines import KEEP as KEEP_BASELINE_RUNS
from labkit.store.baselines import read_baselines, update_baselines
from labkit.store.files import (
    REQUESTS_FILE,
    RUN_FILE,
    RUN_SCHEMA_VERSION,
    ResultsError,
    atomic_write_bytes,
    atomic_write_text,
    results_root,
)
from labkit.store.load import MEASURE_COLUMNS, RUN_COLUMNS, Results, load_results, measure_rows, read_run
from labkit.store.recorded import RecordedError, import_figures, parse_figures
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
