"""The recipe tables of the optional workloads, by [measure] key, in the order their keys are checked, listed
and described: the schema (fields.py), the build and its hash (build.py), the cross-key rules (rules.py) and the
description (describe.py) read this dict, so a workload's recipe half is its `WorkloadTable` and one entry here
(docs/architecture.md, "How to add a workload").

Why a registry here and not in labkit/measure/workloads/: the recipe package sits below measure in the layering,
so it cannot read the measure registry; each measure workload names its table's key (`Workload.recipe_key`), and
tests/measure/test_workloads.py checks the two agree. A test that defines a workload of its own adds its table
here with `monkeypatch.setitem`, as it adds the workload to WORKLOADS.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import labkit.recipe.schema as s
from labkit.recipe.canaryplan import CANARY_TABLE
from labkit.recipe.contentplan import CONTENT_TABLE
from labkit.recipe.depthplan import DEPTH_TABLE
from labkit.recipe.interferenceplan import INTERFERENCE_TABLE
from labkit.recipe.loadplan import LOAD_TABLE, SLO_TABLE
from labkit.recipe.measureplan import MeasurePlan, Rows, WorkloadTable
from labkit.recipe.sessionplan import AGENTIC_TABLE, IDLE_TABLE

WORKLOAD_TABLES: dict[str, WorkloadTable[Any]] = {
    t.key: t
    for t in (
        CONTENT_TABLE,
        AGENTIC_TABLE,
        IDLE_TABLE,
        DEPTH_TABLE,
        CANARY_TABLE,
        LOAD_TABLE,
        SLO_TABLE,
        INTERFERENCE_TABLE,
    )
}


def workload_fields(partial: bool) -> dict[str, s.Field]:
    """`[measure]`'s optional workload keys, each with its schema field."""
    return {key: t.field(partial) for key, t in WORKLOAD_TABLES.items()}


def workload_plans(measure: dict) -> dict[str, object]:
    """The plan object of every workload the merged, checked [measure] table sets (unset: absent)."""
    return {key: t.plan(measure[key]) for key, t in WORKLOAD_TABLES.items() if measure.get(key)}


def check_workloads(merged: dict) -> None:
    """Every workload table's cross-key rule on the merged recipe."""
    for t in WORKLOAD_TABLES.values():
        t.rule(merged)


def workload_targets(measure: dict) -> set[str]:
    """The measures the set workloads produce that `measure.target_measures` may name."""
    return {key for k, t in WORKLOAD_TABLES.items() if measure.get(k) for key in t.targets(measure[k])}


def workload_rows(m: MeasurePlan) -> Rows:
    """The `labkit show` lines of the workloads the plan asks for, in registry order."""
    return [row for t in WORKLOAD_TABLES.values() if (p := t.of(m)) for row in t.rows(p, m)]


def plan_record(m: MeasurePlan) -> dict[str, Any]:
    """The plan as a run's provenance records it: its fields, then every registered workload's key with its plan
    (as a dict) or its unset value, the shape run.json held when each workload was a field of its own."""
    out = dataclasses.asdict(dataclasses.replace(m, workloads={}))
    del out["workloads"]
    for key, t in WORKLOAD_TABLES.items():
        value = m.workloads.get(key)
        out[key] = (
            t.unset
            if value is None
            else dataclasses.asdict(value)
            if dataclasses.is_dataclass(value) and not isinstance(value, type)
            else value
        )
    return out
