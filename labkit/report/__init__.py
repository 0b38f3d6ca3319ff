"""Step 6, report: stored runs in, comparison tables (`results/TABLES.md`, specs in `results/tables.toml`)
and plots out. Always regenerated from the run folders, never edited by hand.

Its modules, each with what it is for: docs/architecture.md, "Packages" (generated from their docstrings).
"""

from labkit.report.action import check, generate, stored_tables
from labkit.report.comparison import CompareError, compare_sides, select
from labkit.report.comparison_text import Shown as ShownComparison
from labkit.report.comparison_text import to_text as compare_text
from labkit.report.gate import images
from labkit.report.load_plots import latency_throughput, load_runs, ttft_distribution
from labkit.report.plots import (
    measure_bars,
    node_series,
    prefill_by_length,
    save_png,
    sweep_figure,
    sweep_plot_path,
    tokens_over_time,
)
from labkit.report.specs import default_spec_file, load_spec, spec_path
from labkit.report.tables import as_list
from labkit.report.target import TargetCheck, check_target
from labkit.report.text import TABLE_MIME, TableView, to_text

__all__ = [
    "TABLE_MIME",
    "CompareError",
    "ShownComparison",
    "TableView",
    "TargetCheck",
    "as_list",
    "check",
    "check_target",
    "compare_sides",
    "compare_text",
    "default_spec_file",
    "generate",
    "images",
    "latency_throughput",
    "load_runs",
    "load_spec",
    "measure_bars",
    "node_series",
    "prefill_by_length",
    "save_png",
    "select",
    "spec_path",
    "stored_tables",
    "sweep_figure",
    "sweep_plot_path",
    "to_text",
    "tokens_over_time",
    "ttft_distribution",
]
