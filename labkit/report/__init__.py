"""Step 6, report: stored runs in, comparison tables (`results/TABLES.md`, specs in `results/tables.toml`)
and plots out. Always regenerated from the run folders, never edited by hand.

specs.py reads tables.toml; format.py turns numbers into cell strings; stats.py reduces a lane's runs to a
Stat (shared by tables and plots) and to RunStats (n, median, mean, 95 % interval, CV); tables.py builds and
renders tables, intervals.py their interval cells (with what the runs are) and note; plots.py draws figures;
axis_table.py builds the tables with a row per lane and one more axis of the measure keys, declared in
tables.toml (content category, session turn, or depth and cache state); tools_table.py the
table of labkit's and other tools' figures of one measure, a row per lane, each figure's definition named; sweep.py builds a sweep's table from its record (a row per point) and
plots.py its figure (docs/sweeps.md, "The sweep table and plot"); text.py shows tables as text in a terminal
(TableView: text there, styled HTML in Jupyter); action.py is the `labkit report` action (write, or check for
drift); target.py is the `measure.target_ci` stopping rule. `labkit compare`: comparison.py selects the runs
of two sides and compares them behind the comparability gate (gate.py), compare.py holds the tests and
verdicts, family.py the Holm correction across the measures of one comparison, comparison_text.py shows a
comparison, content_compare.py says per prompt content category whether acceptance explains a decode
difference.
"""

from labkit.report.action import check, generate, stored_tables
from labkit.report.comparison import CompareError, compare_sides, select
from labkit.report.comparison_text import Shown as ShownComparison
from labkit.report.comparison_text import to_text as compare_text
from labkit.report.gate import images
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
]
