"""The slow-state canary of a Bench's plan: before and after a run's phases, `requests` greedy requests of one
fixed prompt forcing `output_tokens` tokens, each in the window `canary_before` / `canary_after`
(docs/measurement.md, "Slow-state canary").

Why: a GB10 can flip into a slow state (63 against 94 ms per decode step on one public unit) with nothing unusual
in nvidia-smi. The same short decode on the same lane, compared with the node set's healthy baseline, catches it
whatever the telemetry says. The prompt is fixed on purpose (the canary must be the same work every time), so
its requests hit the prefix cache after the first: its windows raise no cache-hit flag, and its records enter no
other figure. The boot's first run skips the canary before: its cold turn must be the first request the engine
serves (the note says so).
"""

from __future__ import annotations

from labkit.measure.records import CanaryWhere, RunSummary
from labkit.measure.session import Session
from labkit.measure.summary.canary import canary_measures
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.windows import TurnWindows
from labkit.recipe import MeasurePlan

# the fixed canary prompt: plain, unambiguous work that any model continues for as long as it is asked
CANARY_PROMPT = (
    "Count upwards from one, writing every number in words on a line of its own, and do not stop: one, two, "
    "three,"
)
CANARY_WINDOW = "canary"  # canary_before, canary_after


def canary_window(where: CanaryWhere) -> str:
    """The evidence window of the canary `where` ("before" or "after") the run's phases."""
    return f"{CANARY_WINDOW}_{where}"


async def measure_canary(s: Session, run: int, where: CanaryWhere) -> None:
    """The canary's requests one after the other, each in a window of its own, between drain waits."""
    plan = s.ctx.plan.canary
    assert plan is not None  # the runner calls this only for a plan with a canary
    window = canary_window(where)
    windows = await TurnWindows.opened(s, run, window)
    for i in range(plan.requests):
        res = await s.ctx.client.stream(s.ctx.stream_request(CANARY_PROMPT, plan.output_tokens, forced=True))
        rec = s.record(res, phase="canary", requested=plan.output_tokens, turn=i)
        rec.canary = where
        rec.server_window = await windows.close([rec], f"canary request {i + 1} ({where})")


async def _before(s: Session, rep: int) -> None:
    """Before the others, except on the boot's first repetition (its cold turn must be the engine's first
    request; noted)."""
    if rep == 0 and s.ctx.cold_expected:
        s.log.notes.append("canary: none before the boot's first run (its cold turn comes first)")
        return
    await measure_canary(s, rep, "before")


async def _after(s: Session, rep: int) -> None:
    await measure_canary(s, rep, "after")


def _planned(plan: MeasurePlan, cold: bool) -> int:
    """Before and after every repetition, but before the first one after a boot."""
    return (plan.canary.requests if plan.canary else 0) * (2 * plan.runs - cold)


def _summarize(s: RunSummary, inp: SummaryInput) -> None:
    canary_measures(s, inp.records)


CANARY = Workload(
    name="canary",
    recipe_key="canary",
    role="added",
    half="always",
    heading="Slow-state canary",
    table="measured",
    windows=(CANARY_WINDOW,),
    # a slow canary speaks of the run as a whole: a flag in its window marks every figure of the run
    local_windows=False,
    measures=("canary_ms", "canary_ms_before", "canary_ms_after"),
    active=lambda plan: plan.canary is not None,
    planned=_planned,
    before=_before,
    run=_after,  # registered last: after every other workload
    window=lambda rec: canary_window(rec.canary) if rec.canary else None,
    summarize=_summarize,
)
