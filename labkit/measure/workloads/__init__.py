"""The workload registry: every way labkit measures an endpoint, one module each, in the order a repetition runs
them (docs/architecture.md, "How to add a workload").

Modules: base (the `Workload` type and what its summary is handed), windows (the scrapes between a workload's
requests and a window's acceptance), decode (cold turn, warmups, c1 turns, cK lockstep groups), content (c1
turns on the pinned corpus, per category), agentic (multi-turn sessions), idle (a request after a pause), depth
(requests at a context depth, uncached and cached), load (closed- and open-loop load levels),
interference (prompts arriving while streams decode), prefill (prompts fitted to a length, max_tokens=1), canary
(a fixed short decode before and after the others).

An explicit dict, as the engine registry is: the runner, the request count, the sanity windows, the summary, the
comparability gate and the tables walk it, so a workload added here is run, counted, windowed, summarised,
compared and shown without another list to edit.
"""

from collections.abc import Callable

from labkit.measure.records import RequestRecord
from labkit.measure.workloads.agentic import AGENTIC
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.canary import CANARY
from labkit.measure.workloads.content import CONTENT
from labkit.measure.workloads.decode import DECODE
from labkit.measure.workloads.depth import DEPTH
from labkit.measure.workloads.idle import IDLE
from labkit.measure.workloads.interference import INTERFERENCE
from labkit.measure.workloads.load import LOAD
from labkit.measure.workloads.prefill import PREFILL
from labkit.recipe import MeasurePlan

# run order within a repetition (a workload's `before` step comes ahead of every `run`); also the summary's order
WORKLOADS: dict[str, Workload] = {
    w.name: w for w in (DECODE, CONTENT, AGENTIC, IDLE, DEPTH, LOAD, INTERFERENCE, PREFILL, CANARY)
}


def window_of(rec: RequestRecord) -> str | None:
    """The measured window a record belongs to: its workload's (records are tagged with the workload's name as
    their phase); None for warmups and any phase no workload claims."""
    w = WORKLOADS.get(rec.phase)
    return w.window(rec) if w is not None else None


def tolerated_failures(plan: MeasurePlan) -> Callable[[str], float]:
    """The failed share a window may have and stay valid, by its name: its workload's (by the window-name
    prefixes the workloads declare), 0 for any other."""

    def share(window: str) -> float:
        for w in WORKLOADS.values():
            if window.startswith(w.windows):
                return w.tolerated_failures(plan)
        return 0.0

    return share


__all__ = ["WORKLOADS", "SummaryInput", "Workload", "tolerated_failures", "window_of"]
