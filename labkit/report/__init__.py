"""Step 6, report: stored runs in, comparison tables (`results/TABLES.md`, specs in `results/tables.toml`)
and plots out. Always regenerated from the run folders, never edited by hand.

specs.py reads tables.toml; format.py turns numbers into cell strings; stats.py reduces a lane's runs to a
Stat (shared by tables and plots); tables.py builds and renders tables; plots.py draws figures;
action.py is the `labkit report` action (write, or check for drift).
"""

from labkit.report.action import TABLES_FILE, Report, check, generate
from labkit.report.format import (
    EM_DASH,
    EN_DASH,
    MISSING,
    Stat,
    fmt_acceptance,
    fmt_kv,
    fmt_nfs,
    fmt_number,
    fmt_range,
    fmt_stat,
    fmt_with_cold,
)
from labkit.report.plots import latest_runs_with_requests, measure_bars, prefill_by_length, tokens_over_time
from labkit.report.specs import (
    TABLES_SPEC,
    ColumnSpec,
    ReportError,
    RowSpec,
    TableSpec,
    default_spec_file,
    load_spec,
    spec_path,
)
from labkit.report.stats import prefill_points
from labkit.report.tables import (
    Lane,
    Table,
    as_list,
    build_table,
    build_tables,
    cell,
    render_document,
    to_markdown,
    to_styler,
)

__all__ = [
    "EM_DASH",
    "EN_DASH",
    "MISSING",
    "TABLES_FILE",
    "TABLES_SPEC",
    "ColumnSpec",
    "Lane",
    "Report",
    "ReportError",
    "RowSpec",
    "Stat",
    "Table",
    "TableSpec",
    "as_list",
    "build_table",
    "build_tables",
    "cell",
    "check",
    "default_spec_file",
    "fmt_acceptance",
    "fmt_kv",
    "fmt_nfs",
    "fmt_number",
    "fmt_range",
    "fmt_stat",
    "fmt_with_cold",
    "generate",
    "latest_runs_with_requests",
    "load_spec",
    "measure_bars",
    "prefill_by_length",
    "prefill_points",
    "render_document",
    "spec_path",
    "to_markdown",
    "to_styler",
    "tokens_over_time",
]
