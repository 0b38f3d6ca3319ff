"""Engine adapters: a LanePlan and its nodes in; pure per-node launch commands, readiness probes and
boot-log parsers (BootLog -> BootFacts) out. `ENGINES` is the registry, one adapter class per engine kind,
each with its row of the engine facts table in labkit.recipe; `engine_for(plan)` picks the adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from labkit.recipe import ENGINE_FACTS, EngineFacts, LanePlan
from labkit.serve.engines.base import BootFacts, BootLog, BootPhase, Engine, NodeLaunch, NodeSpec
from labkit.serve.engines.llamacpp import LlamaCpp
from labkit.serve.engines.sglang import Sglang
from labkit.serve.engines.sim import Sim
from labkit.serve.engines.vllm import Vllm

ENGINES: Mapping[str, type[Engine]] = MappingProxyType(
    {"vllm": Vllm, "sglang": Sglang, "llamacpp": LlamaCpp, "sim": Sim}
)


def engine_for(plan: LanePlan) -> Engine:
    """The adapter for plan.engine.kind."""
    kind = plan.engine.kind
    if kind not in ENGINES:
        raise ValueError(f"unknown engine kind {kind!r}")
    return ENGINES[kind].for_plan(plan)


def registry_problems(
    engines: Mapping[str, type[Engine]] = ENGINES, facts: Mapping[str, EngineFacts] = ENGINE_FACTS
) -> list[str]:
    """What keeps the registry and the facts table from agreeing ([] when they do): a kind with an adapter
    and no facts row or the reverse, an adapter under another kind's key, an adapter with no known flags,
    a facts row whose parallelism flags its adapter does not know (docs/engines.md, "Engine facts")."""
    out = [
        f"{k}: an adapter ({engines[k].__name__}) but no engine facts row" for k in engines if k not in facts
    ]
    out += [f"{k}: an engine facts row but no adapter in ENGINES" for k in facts if k not in engines]
    for kind in (k for k in engines if k in facts):
        adapter, row = engines[kind], facts[kind]
        if adapter.kind != kind or row.kind != kind:
            out.append(f"{kind}: adapter kind {adapter.kind!r}, facts kind {row.kind!r}")
        if not adapter.known_flags:
            out.append(f"{kind}: {adapter.__name__}.known_flags is empty")
        unknown = sorted(row.parallel.all_flags - adapter.known_flags)
        if unknown:
            out.append(
                f"{kind}: parallelism flags not in {adapter.__name__}.known_flags: {', '.join(unknown)}"
            )
    return out


__all__ = [
    "BootFacts",
    "BootLog",
    "BootPhase",
    "Engine",
    "NodeLaunch",
    "NodeSpec",
    "engine_for",
]
