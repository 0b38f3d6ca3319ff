"""Step 6, report: stored runs in, comparison tables (`results/TABLES.md`, specs in `results/tables.toml`)
and plots out. Always regenerated from the run folders, never edited by hand.
"""

from labkit.report.plots import measure_bars, prefill_by_length, tokens_over_time
from labkit.report.tables import (
    EN_DASH,
    Stat,
    Table,
    as_list,
    build_table,
    build_tables,
    check,
    generate,
    load_spec,
    prefill_points,
    spec_path,
    to_markdown,
    to_styler,
)

__all__ = [
    "EN_DASH", "Stat", "Table", "as_list", "build_table", "build_tables", "check", "generate", "load_spec",
    "measure_bars", "prefill_by_length", "prefill_points", "spec_path", "to_markdown", "to_styler",
    "tokens_over_time",
]
