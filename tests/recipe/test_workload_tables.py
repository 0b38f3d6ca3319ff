"""The recipe half of the workloads (labkit/recipe/workloads.py): a table registered there is checked, built,
described, ruled and left out of the hash while unset, with no other recipe module naming it; and the plan a run
records keeps the shape run.json always had."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import labkit.recipe.schema as s
from labkit.errors import RecipeError
from labkit.recipe import (
    DecodePlan,
    DepthPlan,
    MeasurePlan,
    PrefillPlan,
    describe_plan,
    load_recipe,
    plan_record,
)
from labkit.recipe.canaryplan import CANARY_TABLE, CanaryPlan
from labkit.recipe.measureplan import Rows, WorkloadTable
from labkit.recipe.workloads import WORKLOAD_TABLES

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[2]
SIM = (REPO / "recipes/sim/recipe.toml").read_text()


@dataclasses.dataclass(frozen=True)
class EchoPlan:
    requests: int
    words: int


def _rows(p: EchoPlan, m: MeasurePlan) -> Rows:
    return [("echo", f"{p.requests} echoes of {p.words} words")]


def _rule(merged: dict) -> None:
    echo = merged["measure"].get("echo")
    if echo and merged["measure"]["api"] != "chat":
        raise s.Invalid("measure.echo", "echoes need the chat API")


ECHO = WorkloadTable[EchoPlan](
    key="echo",
    field=lambda partial: s.Field(
        s.table(
            {"requests": s.Field(s.integer(1, 8), default=2), "words": s.Field(s.integer(1), default=4)},
            partial=partial,
        )
    ),
    plan=lambda t: EchoPlan(t["requests"], t["words"]),
    rows=_rows,
    rule=_rule,
    targets=lambda t: {"echo_ms"},
)


def _recipe(tmp_path: Path, extra: str = "") -> Path:
    folder = tmp_path / "sim"
    folder.mkdir(exist_ok=True)
    (folder / "recipe.toml").write_text(SIM.replace("\ntimeout = 60\n", "\ntimeout = 60\n" + extra, 1))
    return folder


def test_a_registered_table_is_checked_built_described_and_hashed_only_when_set(tmp_path, monkeypatch):
    before = load_recipe(_recipe(tmp_path)).resolve()
    monkeypatch.setitem(WORKLOAD_TABLES, "echo", ECHO)
    unset = load_recipe(_recipe(tmp_path)).resolve()
    assert unset.recipe_hash == before.recipe_hash and unset.resolved == before.resolved
    assert ECHO.of(unset.measure) is None and "echo" not in describe_plan(unset)

    plan = load_recipe(_recipe(tmp_path, "echo = { words = 9 }\n")).resolve()
    assert ECHO.of(plan.measure) == EchoPlan(2, 9)  # the default filled in
    assert plan.resolved["measure"]["echo"] == {"requests": 2, "words": 9}
    assert plan.recipe_hash != before.recipe_hash
    lines = describe_plan(plan).splitlines()
    assert [line.split()[0] for line in lines if line.split()[0] in ("decode", "echo", "prefill")] == [
        "decode",
        "echo",
        "prefill",
    ]
    assert any(line.endswith("2 echoes of 9 words") for line in lines)


def test_a_registered_tables_errors_name_the_file_and_key(tmp_path, monkeypatch):
    monkeypatch.setitem(WORKLOAD_TABLES, "echo", ECHO)
    with pytest.raises(RecipeError) as bad:
        load_recipe(_recipe(tmp_path, "echo = { requests = 99 }\n"))
    assert "sim/recipe.toml" in str(bad.value) and "measure.echo.requests" in str(bad.value)
    with pytest.raises(RecipeError, match=r"measure\.echo\.word: unknown key \(did you mean 'words'\?\)"):
        load_recipe(_recipe(tmp_path, "echo = { word = 3 }\n"))
    with pytest.raises(RecipeError, match=r"measure\.echo: echoes need the chat API"):
        load_recipe(_recipe_api(tmp_path))


def _recipe_api(tmp_path: Path) -> Path:
    folder = _recipe(tmp_path, "echo = {}\n")
    toml = folder / "recipe.toml"
    toml.write_text(toml.read_text().replace('api = "chat"', 'api = "completions"'))
    return folder


def test_a_registered_tables_measures_may_be_targets(tmp_path, monkeypatch):
    target = 'target_ci = 0.05\ntarget_measures = ["echo_ms"]\n'
    monkeypatch.setitem(WORKLOAD_TABLES, "echo", ECHO)
    with pytest.raises(RecipeError, match="'echo_ms' is not a measure this plan produces"):
        load_recipe(_recipe(tmp_path, target))  # the table unset: its measures are not made
    assert load_recipe(_recipe(tmp_path, target + "echo = {}\n")).resolve().measure.ci_measures() == (
        "echo_ms",
    )


def test_the_plan_a_run_records_keeps_its_old_shape():
    """run.json's provenance plan held one key per workload (unset: None or ()); the gate compares it for runs
    without a resolved recipe, so it must read as it always did."""
    base = MeasurePlan("chat", 1, DecodePlan((1,), 2, 8, 0), PrefillPlan((64,), 1), 10.0)
    record = plan_record(base)
    workloads = ["content", "agentic", "idle_s", "depth", "canary", "load", "slo", "interference"]
    assert list(record)[-9:] == ["clock_drop", *workloads]
    assert [record[k] for k in workloads] == [(), None, (), None, None, None, None, None]
    depth = DepthPlan((256,), prompt_tokens=32)
    record = plan_record(base.with_workload("depth", depth).with_workload("content", ("code",)))
    assert record["depth"] == dataclasses.asdict(depth) and record["content"] == ("code",)


def test_with_workload_sets_and_leaves_out():
    base = MeasurePlan("chat", 1, DecodePlan((1,), 2, 8, 0), PrefillPlan((64,), 1), 10.0)
    canary = base.with_workload("canary", CanaryPlan())
    assert canary.canary == CanaryPlan() and CANARY_TABLE.of(canary) == CanaryPlan()
    assert canary.with_workload("canary", None) == base
    assert base.with_workload("content", ()).workloads == {}
