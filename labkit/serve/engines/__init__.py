"""Engine adapters: a LanePlan and its nodes in; pure per-node launch commands, readiness probes and
boot-log parsers (BootLog -> BootFacts) out. `engine_for(plan)` picks the adapter for plan.engine.kind.
"""

from __future__ import annotations

from labkit.serve.engines.base import BootFacts, BootLog, BootPhase, Engine, NodeLaunch, NodeSpec, Probe
from labkit.serve.engines.llamacpp import LlamaCpp
from labkit.serve.engines.sglang import Sglang
from labkit.serve.engines.sim import Sim
from labkit.serve.engines.vllm import Vllm


def engine_for(plan) -> Engine:
    """The adapter for plan.engine.kind."""
    kind = plan.engine.kind
    if kind == "vllm":
        return Vllm()
    if kind == "sglang":
        return Sglang()
    if kind == "llamacpp":
        return LlamaCpp()
    if kind == "sim":
        return Sim.for_plan(plan)
    raise ValueError(f"unknown engine kind {kind!r}")


__all__ = [
    "BootFacts",
    "BootLog",
    "BootPhase",
    "Engine",
    "LlamaCpp",
    "NodeLaunch",
    "NodeSpec",
    "Probe",
    "Sglang",
    "Sim",
    "Vllm",
    "engine_for",
]
