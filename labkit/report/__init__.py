"""Step 6, report: stored runs in, comparison tables (`results/TABLES.md`, specs in `results/tables.toml`)
and plots out. Always regenerated from the run folders, never edited by hand.

specs.py reads tables.toml; format.py turns numbers into cell strings; stats.py reduces a lane's runs to a
Stat (shared by tables and plots) and to RunStats (n, median, mean, 95 % interval, CV); tables.py builds and renders tables; plots.py draws figures;
text.py shows tables as text in a terminal (TableView: text there, styled HTML in Jupyter);
action.py is the `labkit report` action (write, or check for drift).
"""

from labkit.report.action import TABLES_FILE, Report, check, generate, stored_tables
from labkit.report.compare import (
    DEFAULT_MARGIN,
    MeasureComparison,
    compare_values,
    direction,
    paired,
    tost_p,
    welch,
)
from labkit.report.compare_text import Shown as ShownComparison
from labkit.report.compare_text import to_frame as compare_frame
from labkit.report.compare_text import to_text as compare_text
from labkit.report.comparison import CompareError, Comparison, Side, compare_sides, select
from labkit.report.format import (
    EM_DASH,
    EN_DASH,
    MISSING,
    PLUS_MINUS,
    Stat,
    fmt_acceptance,
    fmt_few,
    fmt_interval,
    fmt_kv,
    fmt_nfs,
    fmt_number,
    fmt_range,
    fmt_stat,
    fmt_with_cold,
)
from labkit.report.gate import Gate, GateItem, gate
from labkit.report.plots import (
    latest_runs_with_requests,
    measure_bars,
    node_series,
    prefill_by_length,
    tokens_over_time,
)
from labkit.report.specs import (
    INTERVALS,
    TABLES_SPEC,
    ColumnSpec,
    ReportError,
    RowSpec,
    TableSpec,
    default_spec_file,
    load_spec,
    spec_path,
)
from labkit.report.stats import (
    MIN_INTERVAL_RUNS,
    RunStats,
    boot_of,
    prefill_points,
    run_stats,
    run_values,
    t_cdf,
    t_ppf,
    unit_of,
)
from labkit.report.tables import (
    FLAG_MARK,
    Lane,
    Table,
    as_list,
    build_table,
    build_tables,
    cell,
    flags_of,
    render_document,
    to_markdown,
    to_styler,
)
from labkit.report.target import TargetCheck, check_target
from labkit.report.text import TABLE_MIME, TableView, to_text

__all__ = [
    "node_series",
    "stored_tables",
    "DEFAULT_MARGIN",
    "CompareError",
    "Comparison",
    "Gate",
    "GateItem",
    "MeasureComparison",
    "ShownComparison",
    "Side",
    "compare_frame",
    "compare_sides",
    "compare_text",
    "compare_values",
    "direction",
    "gate",
    "paired",
    "select",
    "tost_p",
    "welch",
    "TargetCheck",
    "check_target",
    "EM_DASH",
    "EN_DASH",
    "FLAG_MARK",
    "INTERVALS",
    "MIN_INTERVAL_RUNS",
    "MISSING",
    "PLUS_MINUS",
    "TABLES_FILE",
    "TABLES_SPEC",
    "TABLE_MIME",
    "ColumnSpec",
    "Lane",
    "Report",
    "ReportError",
    "RowSpec",
    "RunStats",
    "Stat",
    "Table",
    "TableSpec",
    "TableView",
    "as_list",
    "boot_of",
    "build_table",
    "build_tables",
    "cell",
    "check",
    "default_spec_file",
    "flags_of",
    "fmt_acceptance",
    "fmt_few",
    "fmt_interval",
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
    "run_stats",
    "run_values",
    "spec_path",
    "t_cdf",
    "t_ppf",
    "to_markdown",
    "to_styler",
    "to_text",
    "tokens_over_time",
    "unit_of",
]
