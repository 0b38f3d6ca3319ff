"""The workload registry: every way labkit measures an endpoint, one module each, in the order a repetition runs
them (docs/architecture.md, "How to add a workload").

Modules: base (the `Workload` type and what its summary is handed), windows (the scrapes between a workload's
requests and a window's acceptance), decode (cold turn, warmups, c1 turns, cK lockstep groups), content (c1
turns on the pinned corpus, per category), agentic (multi-turn sessions), idle (a request after a pause), depth
(requests at a context depth, uncached and cached), prefill (prompts fitted to a length, max_tokens=1), canary
(a fixed short decode before and after the others).

An explicit dict, as the engine registry is: the runner, the request count, the sanity windows, the summary, the
comparability gate and the tables walk it, so a workload added here is run, counted, windowed, summarised,
compared and shown without another list to edit.
"""

from labkit.measure.records import RequestRecord
from labkit.measure.workloads.agentic import AGENTIC
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.canary import CANARY
from labkit.measure.workloads.content import CONTENT
from labkit.measure.workloads.decode import DECODE
from labkit.measure.workloads.depth import DEPTH
from labkit.measure.workloads.idle import IDLE
from labkit.measure.workloads.prefill import PREFILL

# run order within a repetition (a workload's `before` step comes ahead of every `run`); also the summary's order
WORKLOADS: dict[str, Workload] = {w.name: w for w in (DECODE, CONTENT, AGENTIC, IDLE, DEPTH, PREFILL, CANARY)}


def window_of(rec: RequestRecord) -> str | None:
    """The measured window a record belongs to: its workload's (records are tagged with the workload's name as
    their phase); None for warmups and any phase no workload claims."""
    w = WORKLOADS.get(rec.phase)
    return w.window(rec) if w is not None else None


__all__ = ["WORKLOADS", "SummaryInput", "Workload", "window_of"]
