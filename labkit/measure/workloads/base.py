"""The `Workload` type: one way of measuring, with everything the rest of labkit needs to know about it.

Why one value per workload: a workload used to be written down in hand-kept lists in the runner, its request
count, the sanity windows, the summary, the gate and the tables, and a list that was missed failed silently
(a wrong progress bar, a changed workload read as a blocking plan difference). Now those steps walk the
registry (labkit/measure/workloads/__init__.py), and a test checks that every registered workload has its
catalogue rows, its docs section and its table (docs/architecture.md, "How to add a workload").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from labkit.measure.records import GroupRecord, RequestRecord, RunSummary
from labkit.measure.server import metrics as mx
from labkit.measure.session import Session
from labkit.recipe import MeasurePlan

# How the comparability gate reads a difference in this workload's recipe table: "plan" workloads are the
# measurement plan itself (a difference blocks); "content" and "added" run in windows of their own with prompts
# no other workload shares, so a difference only adds or removes measures (docs/compare.md)
Role = Literal["plan", "content", "added"]
# Which half of a run it belongs to: callers may measure only the decode or only the prefill half
# (BenchOptions.decode / .prefill); "always" runs in both
Half = Literal["decode", "prefill", "always"]
Step = Callable[[Session, int], Awaitable[None]]


@dataclass(frozen=True)
class SummaryInput:
    """What the summary hands every workload: the run's records and groups, its plan, and the run-wide facts
    some figures need (the output token sources, the RTT, how prompts were counted, each content category's
    pooled acceptance, the gauges sampled during load levels, the load level the engine died in)."""

    records: Sequence[RequestRecord]  # every record, failed ones included (a failed turn ends a session)
    ok: Sequence[RequestRecord]
    groups: Sequence[GroupRecord]
    plan: MeasurePlan
    src: str  # the ok records' output token sources, joined ("none" without any)
    rtt_ns: int = 0
    counter_kind: str = ""
    content_acceptance: Mapping[str, mx.Acceptance] | None = None
    level_gauges: Mapping[str, Sequence[Sequence[float]]] | None = None  # RunLog.level_gauges
    failed_levels: Mapping[str, str] | None = None  # RunLog.failed_levels


@dataclass(frozen=True)
class Workload:
    """One way of measuring. `name` is its registry key and its records' `phase`; `recipe_key` the [measure]
    key that asks for it; `measures` the catalogue rows it fills (key patterns of labkit/measures.py, shipped or
    registered in its ADDED_ROWS); `heading` its section in docs/measurement.md; `table` the id of the
    results/tables.toml table that shows it; `windows` the name prefixes of its evidence windows, and
    `local_windows` whether a flag raised in one covers only its own measures (False: a flag there speaks of the whole run, as the canary's does).

    `active(plan)`: the plan asks for it. `planned(plan, cold)`: its requests over all the plan's repetitions
    (`cold`: a cold turn is expected), for the progress bar. `run(session, rep)` measures one repetition;
    `before(session, rep)`, for a workload that brackets the others, measures before any of them. `window(rec)`
    names the window one of its records belongs to (None: a record no figure is made of). `summarize(s, inp)`
    writes its measures onto the RunSummary. `tolerated_failures(plan)`: the failed share its windows may have
    and stay valid."""

    name: str
    recipe_key: str
    role: Role
    half: Half
    heading: str
    table: str
    windows: tuple[str, ...]
    measures: tuple[str, ...]
    active: Callable[[MeasurePlan], bool]
    planned: Callable[[MeasurePlan, bool], int]
    run: Step
    window: Callable[[RequestRecord], str | None]
    summarize: Callable[[RunSummary, SummaryInput], None]
    before: Step | None = None
    local_windows: bool = True
    # the share of a window's requests that may fail before output sanity makes it invalid: 0 for a workload
    # whose every request is a sample; a load level tolerates measure.load.max_error_share
    tolerated_failures: Callable[[MeasurePlan], float] = lambda plan: 0.0
    # other [measure] tables it reads beside its own (the load workload's [measure.slo]): the gate reads them
    # in the same role
    also_keys: tuple[str, ...] = ()

    def runs_in(self, decode: bool, prefill: bool) -> bool:
        """Whether it belongs to the halves a caller asked for."""
        return self.half == "always" or (decode if self.half == "decode" else prefill)
