"""The workload registry (labkit/measure/workloads/): every registered workload has its catalogue rows, its docs
section, its table and a recipe key that leaves old hashes alone, and the request count the progress bar is
given is the count a real run sends, workload by workload."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from labkit.measure import WORKLOADS, BenchOptions, run_bench
from labkit.measure.runner import active_workloads, planned_requests
from labkit.measure.workloads import Workload, window_of
from labkit.measures import catalogue
from labkit.recipe import DecodePlan, DepthPlan, InterferencePlan, LoadPlan, MeasurePlan, PrefillPlan
from labkit.recipe.canaryplan import CanaryPlan
from labkit.recipe.sessionplan import AgenticPlan
from labkit.recipe.workloads import WORKLOAD_TABLES
from labkit.report.gate import workload_keys
from labkit.sim.oracle import SimOracle

REPO = Path(__file__).resolve().parents[2]
MEASUREMENT_DOC = REPO / "docs/measurement.md"
TABLES_TOML = REPO / "results" / "tables.toml"


def workload_problems(
    workloads: Mapping[str, Workload], doc: str | None = None, tables_toml: str | None = None
) -> list[str]:
    """What a registered workload lacks: catalogue rows for the measures it names (shipped or registered in
    ADDED_ROWS), the docs section it cites, the table it is shown in, and its recipe key: a MeasurePlan field
    for a "plan" workload, else a registered recipe table (labkit/recipe/workloads.py), whose key the build
    leaves out of the recipe hash while unset (else every older recipe's hash would change:
    tests/recipe/test_workload_tables.py). `doc` and `tables_toml` stand in for docs/measurement.md and
    results/tables.toml, for a workload defined in a test with a docs section and table of its own."""
    rows = {m.key for m in catalogue()}
    headings = set(re.findall(r"^## (.+)$", MEASUREMENT_DOC.read_text() if doc is None else doc, re.M))
    toml = TABLES_TOML.read_text() if tables_toml is None else tables_toml
    tables = {t["id"] for t in tomllib.loads(toml)["table"]}
    plan_keys = {f.name for f in dataclasses.fields(MeasurePlan)}
    out = []
    for name, w in workloads.items():
        if name != w.name:
            out.append(f"{name}: registered under another name than its own ({w.name})")
        if not w.measures:
            out.append(f"{name}: names no catalogue measure")
        out += [
            f"{name}: {m} is not a catalogue row (labkit/measures.toml)" for m in w.measures if m not in rows
        ]
        if w.heading not in headings:
            out.append(f"{name}: docs/measurement.md has no section '{w.heading}'")
        if w.table not in tables:
            out.append(f"{name}: results/tables.toml has no table '{w.table}'")
        if w.role == "plan" and w.recipe_key not in plan_keys:
            out.append(f"{name}: {w.recipe_key} is not a MeasurePlan field")
        if w.role != "plan" and w.recipe_key not in WORKLOAD_TABLES:
            out.append(f"{name}: measure.{w.recipe_key} has no recipe table (labkit/recipe/workloads.py)")
        if not w.windows:
            out.append(f"{name}: names no window")
    return out


def test_every_registered_workload_has_its_rows_docs_section_table_and_recipe_key():
    assert workload_problems(WORKLOADS) == []


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"measures": ()}, "names no catalogue measure"),
        ({"measures": ("decode_c<N>_p99",)}, "decode_c<N>_p99 is not a catalogue row"),
        ({"heading": "Depth of context"}, "docs/measurement.md has no section 'Depth of context'"),
        ({"table": "depth"}, "results/tables.toml has no table 'depth'"),
        ({"recipe_key": "ctx", "role": "plan"}, "ctx is not a MeasurePlan field"),
        ({"role": "added", "recipe_key": "seed"}, "measure.seed has no recipe table"),
    ],
)
def test_a_workload_missing_a_part_is_named(change, problem):
    broken = dataclasses.replace(WORKLOADS["depth"], **change)
    (found,) = workload_problems({"depth": broken})
    assert found.startswith("depth: ") and problem in found


def test_the_registry_holds_every_workload_in_run_order():
    assert list(WORKLOADS) == [
        "decode",
        "content",
        "agentic",
        "idle",
        "depth",
        "load",
        "interference",
        "prefill",
        "canary",
    ]
    assert workload_keys("content", "added") == (
        "content",
        "agentic",
        "idle_s",
        "depth",
        "load",
        "slo",
        "interference",
        "canary",
    )


def _every_workload(runs: int = 2) -> MeasurePlan:
    """A small plan that asks for every registered workload, so each is run, counted and summarised."""
    return MeasurePlan(
        "chat",
        runs,
        DecodePlan((1, 2), 2, 16, 1),
        PrefillPlan((128,), 1),
        30.0,
        workloads={
            "content": ("code",),
            "agentic": AgenticPlan(turns=2, tool_tokens=64, answer_tokens=8),
            "idle_s": (1,),
            "depth": DepthPlan((256,), prompt_tokens=32, output_tokens=8),
            "canary": CanaryPlan(requests=2, output_tokens=8),
            "load": LoadPlan(concurrency=(2,), level_requests=2, prompt_tokens=32, output_tokens=8),
            "interference": InterferencePlan((128,), 2, stream_tokens=48, warm_tokens=8, arrivals=1),
        },
    )


def test_a_plan_with_every_workload_sends_what_was_planned_and_summarises_each():
    """The progress bar's total is each workload's own count: a workload counted wrong (the canary before the
    boot's first repetition is skipped, its count once was not) shows here as a difference."""
    plan = _every_workload()
    assert [w.name for w in active_workloads(plan)] == list(WORKLOADS)
    with SimOracle() as sim:
        res = run_bench(sim.url, plan, BenchOptions(progress=False, cold_expected=True))
    assert len(res.records) == planned_requests(plan, cold_expected=True)
    by_phase = {w.name: [r for r in res.records if r.phase == w.name] for w in WORKLOADS.values()}
    assert all(by_phase.values())
    assert len(by_phase["canary"]) == 2 * (
        2 * 2 - 1
    )  # before and after each repetition, not before the first
    # every workload's records are in windows of its own, and it wrote the measures it names
    for name, recs in by_phase.items():
        prefixes = WORKLOADS[name].windows
        assert all((window_of(r) or "").startswith(prefixes) for r in recs), name
    keys = set(res.summary.measures)
    assert {"decode_c1", "decode_c2_agg", "decode_c1@code", "agentic_ttft_t2", "idle_1_ttft"} <= keys
    assert {"depth_256_ttft", "depth_256_ttft_cached", "prefill_128", "canary_ms"} <= keys
    assert {"load_ttft@load=2@stat=p50", "load_output_tps@load=2", "interference_128_ttft"} <= keys


def test_asking_for_one_half_runs_only_its_workloads():
    plan = _every_workload(runs=1)
    decode_only = [w.name for w in active_workloads(plan, decode=True, prefill=False)]
    prefill_only = [w.name for w in active_workloads(plan, decode=False, prefill=True)]
    assert decode_only == ["decode", "content", "agentic", "idle", "depth", "load", "interference", "canary"]
    assert prefill_only == ["prefill", "canary"]
    assert planned_requests(plan, False, decode=False, prefill=True) == (1 + 1) + 2 * 2
