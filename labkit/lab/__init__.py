"""Step 8, lab: one lane end to end, the way the bench notebook and `make bench` run it:

    plan = lab.plan("dsv41", spec="dspark")      # recipe.toml --resolve--> LanePlan
    print(lab.describe(plan))                    # dry run: the plan and each node's exact command
    done = lab.measure(plan)                     # --stage--> view --up--> endpoint --measure--> records
                                                 # --store--> results/<recipe>/<variant>/<run-id>/
    lab.tables(done)                             # --report--> tables, regenerated from the stored files

Teardown always happens: `measure` boots inside `Lane.up()`, whose exit removes and verifies the lane on
every node whatever happened in between. Every repetition (`measure.runs`) is its own run folder, so tables
show the median and min–max across runs; only the first after boot carries the cold turn.

The steps: resolve.py (recipe to plan), runs.py (stage, boot, measure, store, teardown), show.py (tables
and figures from the stored files), compare.py (stored lanes compared), papermill.py (the executed notebook's copy),
sweep.py (one key walked across values, a lane per point) and resume.py (which points a re-run skips).
"""

from __future__ import annotations

from labkit.lab.compare import compare
from labkit.lab.papermill import attach_executed_notebook, papermill_output_path
from labkit.lab.resolve import commands, describe, plan, spec_k
from labkit.lab.resume import SweepRefused
from labkit.lab.runs import (
    BootHooks,
    LaneRun,
    materialize_model,
    measure,
    measure_on_one_boot,
    store_result,
    write_records,
)
from labkit.lab.show import figures, save_figures, tables
from labkit.lab.sweep import (
    SweepPlan,
    SweepRun,
    describe_sweep,
    save_sweep_figure,
    sweep,
    sweep_figure,
    sweep_plan,
    sweep_tables,
)

__all__ = [
    "BootHooks",
    "SweepPlan",
    "SweepRefused",
    "SweepRun",
    "describe_sweep",
    "measure_on_one_boot",
    "save_sweep_figure",
    "sweep",
    "sweep_figure",
    "sweep_plan",
    "sweep_tables",
    "LaneRun",
    "attach_executed_notebook",
    "commands",
    "compare",
    "describe",
    "figures",
    "materialize_model",
    "measure",
    "papermill_output_path",
    "plan",
    "save_figures",
    "spec_k",
    "store_result",
    "tables",
    "write_records",
]
