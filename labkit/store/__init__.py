"""Step 5, store: a plan and its records in, `results/<recipe>/<variant>/<run-id>/` out (run.json with
provenance, raw samples as CSV/JSON); loading reads every run folder back into tables for the report.
"""

from labkit.store.recorded import RecordedError, import_figures, parse_figures
from labkit.store.runs import (
    MEASURE_COLUMNS,
    RUN_FILE,
    Results,
    ResultsError,
    ResultsStore,
    atomic_write_text,
    attach_bytes,
    attach_file,
    load_results,
    read_run,
)

__all__ = [
    "MEASURE_COLUMNS", "RUN_FILE", "RecordedError", "Results", "ResultsError", "ResultsStore", "atomic_write_text",
    "attach_bytes", "attach_file", "import_figures", "load_results", "parse_figures", "read_run",
]
