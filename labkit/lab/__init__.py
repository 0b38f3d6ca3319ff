"""Step 8, lab: one lane end to end, the way the bench notebook and `make bench` run it:

    plan = lab.plan("dsv41", spec="dspark")      # recipe.toml --resolve--> LanePlan
    print(lab.describe(plan))                    # dry run: the plan and each node's exact command
    done = lab.measure(plan)                     # --stage--> view --up--> endpoint --measure--> records
                                                 # --store--> results/<recipe>/<variant>/<run-id>/
    lab.tables(done)                             # --report--> tables, regenerated from the stored files

Teardown always happens: `measure` boots inside `Lane.up()`, whose exit removes and verifies the lane on
every node whatever happened in between. Every repetition (`measure.runs`) is its own run folder, so tables
show the median and min–max across runs; only the first after boot carries the cold turn.

Its modules, each with what it is for: docs/architecture.md, "Packages" (generated from their docstrings).
"""

from __future__ import annotations

from labkit.lab.compare_lanes import compare
from labkit.lab.endpoint_run import EndpointOrigin, bare_lane, measure_endpoint
from labkit.lab.papermill import attach_executed_notebook
from labkit.lab.resolve import commands, describe, plan
from labkit.lab.rooflines import roofline
from labkit.lab.runs import materialize_model, measure
from labkit.lab.show import agreement, figures, save_figures, tables, wide
from labkit.lab.sweep_run import (
    describe_sweep,
    estimate_sweep,
    save_sweep_figure,
    sweep,
    sweep_figure,
    sweep_plan,
    sweep_tables,
)
from labkit.lab.timing import estimate

__all__ = [
    "EndpointOrigin",
    "agreement",
    "attach_executed_notebook",
    "bare_lane",
    "commands",
    "compare",
    "describe",
    "describe_sweep",
    "estimate",
    "estimate_sweep",
    "figures",
    "materialize_model",
    "measure",
    "measure_endpoint",
    "plan",
    "roofline",
    "save_figures",
    "save_sweep_figure",
    "sweep",
    "sweep_figure",
    "sweep_plan",
    "sweep_tables",
    "tables",
    "wide",
]
