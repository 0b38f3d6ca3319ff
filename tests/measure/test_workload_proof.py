"""Proof that a workload is one place (issue 36): a workload defined entirely in this file, its recipe table and
its measure side registered for the test only, is validated in a recipe, planned, run against the simulator,
stored, summarised, compared by the gate as an added workload and shown in a table, with no labkit file
naming it. Its measure's catalogue row is registered beside the shipped ones (labkit.measures.ADDED_ROWS), so
the table, which comes from a tables.toml of the test's own (`labkit report --spec`), names it by the row's
title and unit, and the registry's own check (tests/measure/test_workloads.py) passes for it.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

import labkit.recipe.schema as s
from labkit import lab, report
from labkit.errors import RecipeError
from labkit.lab.runs import measure_on_one_boot
from labkit.measure import WORKLOADS
from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.runner import active_workloads, planned_requests
from labkit.measure.session import Session
from labkit.measure.workloads import SummaryInput, Workload
from labkit.measure.workloads.windows import TurnWindows
from labkit.measures import ADDED_ROWS, Measure, label, measure_info
from labkit.recipe import MeasurePlan, load_recipe
from labkit.recipe.measureplan import Rows, WorkloadTable
from labkit.recipe.workloads import WORKLOAD_TABLES
from labkit.store import load_results
from tests.measure.test_workloads import workload_problems
from tests.support.lanes import sim_recipe

PORT = 18470
PHASE = "echo_proof"
KEY = "echo_proof_ms"
ECHO_ROWS = (Measure(KEY, "echo TTFT", "ms", "lower", 'median TTFT over the echo requests ("Echo")'),)


@dataclasses.dataclass(frozen=True)
class EchoPlan:
    """`requests` short forced-length requests per repetition, each `output_tokens` long."""

    requests: int
    output_tokens: int


def _fields() -> dict[str, s.Field]:
    return {
        "requests": s.Field(s.integer(1, 8), default=2),
        "output_tokens": s.Field(s.integer(2, 256), default=8),
    }


def _rows(p: EchoPlan, m: MeasurePlan) -> Rows:
    return [("echo", f"{p.requests} requests of {p.output_tokens} forced tokens")]


ECHO_TABLE = WorkloadTable[EchoPlan](
    key="echo_proof",
    field=lambda partial: s.Field(s.table(_fields(), partial=partial)),
    plan=lambda t: EchoPlan(t["requests"], t["output_tokens"]),
    rows=_rows,
)


async def _run(s: Session, rep: int) -> None:
    plan = ECHO_TABLE.of(s.ctx.plan)
    assert plan is not None
    windows = await TurnWindows.opened(s, rep, PHASE)
    for i in range(plan.requests):
        res = await s.ctx.client.stream(
            s.ctx.stream_request(f"echo {rep} {i}", plan.output_tokens, forced=True)
        )
        rec = s.record(res, phase=PHASE, requested=plan.output_tokens, turn=i)
        rec.server_window = await windows.close([rec], f"echo request {i + 1}")


def _summarize(summary: RunSummary, inp: SummaryInput) -> None:
    ttft = [r.ttft_s * 1000 for r in inp.ok if r.phase == PHASE and r.ttft_s is not None]
    if ttft:
        summary.measures[KEY] = statistics.median(ttft)
        summary.samples[KEY] = ttft
        summary.method[KEY] = "median TTFT over the echo requests"


def _window(rec: RequestRecord) -> str | None:
    return PHASE if rec.phase == PHASE else None


ECHO = Workload(
    name=PHASE,
    recipe_key="echo_proof",
    role="added",
    half="decode",
    heading="Echo",
    table="echo_proof",
    windows=(PHASE,),
    measures=(KEY,),
    active=lambda plan: ECHO_TABLE.of(plan) is not None,
    planned=lambda plan, cold: (p.requests * plan.runs) if (p := ECHO_TABLE.of(plan)) else 0,
    run=_run,
    window=_window,
    summarize=_summarize,
)

TABLES = """title = "Echo"
[[table]]
id = "echo_proof"
title = "Echo requests"
columns = "auto"
rows = [{ measure = "echo_proof_ms", decimals = 1 }]
"""
DOC = "# Measurement\n\n## Echo\n\nEcho TTFT: the median TTFT over the echo requests.\n"


@pytest.fixture
def echo_registered(monkeypatch):
    """The test's workload registered on both halves and its catalogue rows, for this test only."""
    monkeypatch.setitem(WORKLOAD_TABLES, ECHO_TABLE.key, ECHO_TABLE)
    monkeypatch.setitem(WORKLOADS, ECHO.name, ECHO)
    monkeypatch.setitem(ADDED_ROWS, ECHO.name, ECHO_ROWS)


def _lane(tmp_path: Path, measure: str = "") -> Path:
    folder = tmp_path / "recipes" / "echolane"
    extra = "[variants.echo.off]\n[variants.echo.on]\nmeasure.echo_proof = { requests = 3 }\n"
    sim_recipe(folder, port=PORT, measure=measure, extra=extra)
    return folder


@pytest.mark.pure
def test_its_recipe_table_is_validated_with_file_and_key(tmp_path, echo_registered):
    with pytest.raises(RecipeError) as bad:
        load_recipe(_lane(tmp_path, measure="echo_proof = { requests = 0 }"))
    assert "echolane/recipe.toml" in str(bad.value) and "measure.echo_proof.requests" in str(bad.value)
    recipe = load_recipe(_lane(tmp_path))
    off, on = recipe.resolve({"echo": "off"}), recipe.resolve({"echo": "on"})
    assert ECHO_TABLE.of(off.measure) is None and "echo_proof" not in off.resolved["measure"]
    assert ECHO_TABLE.of(on.measure) == EchoPlan(3, 8)
    assert "3 requests of 8 forced tokens" in lab.describe(on)
    assert planned_requests(on.measure, False) == planned_requests(off.measure, False) + 3
    assert [w.name for w in active_workloads(on.measure)][-1] == PHASE


@pytest.mark.pure
def test_its_measure_is_a_catalogue_row_and_the_registry_check_passes_for_it(monkeypatch):
    monkeypatch.setitem(WORKLOAD_TABLES, ECHO_TABLE.key, ECHO_TABLE)
    assert measure_info(KEY) is None and workload_problems({PHASE: ECHO}, DOC, TABLES) == [
        f"{PHASE}: {KEY} is not a catalogue row (labkit/measures.toml)"
    ]
    monkeypatch.setitem(ADDED_ROWS, ECHO.name, ECHO_ROWS)
    assert label(KEY) == "echo TTFT (ms)" and measure_info(f"{KEY}@stat=p90") == ECHO_ROWS[0]
    assert workload_problems({PHASE: ECHO}, DOC, TABLES) == []


@pytest.mark.sim
def test_it_is_run_stored_summarised_compared_and_shown(tmp_path, echo_registered):
    recipe = load_recipe(_lane(tmp_path))
    off, on = recipe.resolve({"echo": "off"}), recipe.resolve({"echo": "on"})
    results = tmp_path / "results"
    measure_on_one_boot([off, on], results=results, progress=False)  # one boot, a run folder per variant

    data = load_results(results)
    docs = {doc.variants["echo"]: doc for doc in data.docs.values()}
    assert sorted(docs) == ["off", "on"]
    on_doc, off_doc = docs["on"], docs["off"]
    assert on_doc.plan.measure["echo_proof"] == {
        "requests": 3,
        "output_tokens": 8,
    }  # stored in the resolved recipe
    assert on_doc.provenance.plan["echo_proof"] == {"requests": 3, "output_tokens": 8}
    assert (
        off_doc.provenance.plan["echo_proof"] is None
    )  # the run's plan record names every registered workload
    assert on_doc.summary.measures[KEY] > 0 and KEY not in off_doc.summary.measures
    ids = {d.variants["echo"]: run_id for run_id, d in data.docs.items()}
    stored = data.requests([ids["on"]])
    assert list(stored["phase"]).count(PHASE) == planned_requests(on.measure, False) - planned_requests(
        off.measure, False
    )

    comparison = report.compare_sides(report.select(data, ids["off"]), report.select(data, ids["on"]))
    facts = {item.fact: item for item in comparison.gate.items}
    assert comparison.gate.blocked == []  # an added workload never blocks
    assert "echo" in " ".join(facts["added workloads"].b) and facts["added workloads"].a == ("none",)

    spec = tmp_path / "tables.toml"
    spec.write_text(TABLES)
    text = report.generate(results, spec, write=False, plots=False).markdown
    assert "Echo requests" in text  # its row named by its catalogue row, as tables.toml gives it no label
    echo_row = next(line for line in text.splitlines() if line.startswith("| echo TTFT (ms) |"))
    assert f"{on_doc.summary.measures[KEY]:.1f}" in echo_row
