"""The engine facts table: one frozen row per `engine.kind`, the facts about an engine that the recipe rules,
the serve step and the tiny model builder read (docs/engines.md, "Engine facts"). What an engine does at
boot (its launch commands, log lines, known flags) lives in its adapter in `labkit.serve`; a row holds what
code outside the adapter decides by kind, so adding an engine is one row here and one adapter there.

Pure data: this module imports nothing of labkit, so every package from `recipe` on may read it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

# How a lane of several nodes runs the engine: "ranks" (the nodes together run one engine, its ranks filling
# nodes x cluster.gpus_per_node), "replicas" (every node runs its own server, the head's is the endpoint),
# "one" (one node only; the adapter refuses more).
NodeMode = Literal["ranks", "replicas", "one"]
PARALLEL_AXES = ("tp", "pp", "dp", "ep")


@dataclass(frozen=True)
class ParallelFlags:
    """The command-line flags that set each `engine.parallel` size; the first of each is the one labkit adds
    when the recipe's args give none of them. No flags: the engine takes no parallelism from labkit."""

    tp: tuple[str, ...] = ()
    pp: tuple[str, ...] = ()
    dp: tuple[str, ...] = ()
    ep: tuple[str, ...] = ()
    ep_switch: bool = False  # ep is an on/off flag (vLLM's --enable-expert-parallel), not a size
    dp_inside_tp: tuple[str, ...] = ()  # flags that run the DP groups inside TP, so dp adds no GPUs

    def axis(self, name: str) -> tuple[str, ...]:
        """The flags of one axis ("tp", "pp", "dp" or "ep")."""
        if name not in PARALLEL_AXES:
            raise ValueError(f"unknown parallel axis {name!r}")
        flags: tuple[str, ...] = getattr(self, name)
        return flags

    @property
    def all_flags(self) -> frozenset[str]:
        """Every flag of the table, for the check that the adapter knows them."""
        return frozenset(f for a in PARALLEL_AXES for f in self.axis(a)) | frozenset(self.dp_inside_tp)


@dataclass(frozen=True)
class RequestMetricsFlags:
    """The engine's switches for its own per-request figures in every response (docs/engines.md, "Per-request
    metrics in the response"); all empty: the engine offers none."""

    timing: tuple[str, ...] = ()  # the flag (and value) that adds TTFT, queue and decode times per request
    spec: tuple[str, ...] = ()  # the flag and value that adds per-request speculative-decoding counts
    spec_needs: str = ""  # the flag without which the engine refuses `spec` at boot

    @property
    def offered(self) -> bool:
        return bool(self.timing or self.spec)

    def asked(self, args: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
        """The switches among a lane's rendered args (flag -> values) that turn these figures on."""
        on = []
        for flags in (self.timing, self.spec):
            if flags and flags[0] in args and (args[flags[0]] or ("",))[0] not in ("none", "false"):
                on.append(flags[0])
        return tuple(on)


@dataclass(frozen=True)
class EngineFacts:
    """One engine kind; every field is stated per row (no defaults), so a new row cannot skip one."""

    kind: str  # engine.kind in a recipe, and the key of the adapter registry (labkit.serve.ENGINES)
    name: str  # the engine as messages name it
    runtime: str  # engine.runtime when the recipe gives none: "docker" or "process"
    model_format: str | None  # what a built tiny model is for it: "hf", "gguf"; None = it loads no weights
    nodes: NodeMode  # how several nodes run it
    parallel: ParallelFlags
    flexible_flags: bool  # its CLI reads `--a_b` as `--a-b` and `--a.b` as a key of `--a`'s JSON
    request_metrics: RequestMetricsFlags  # how a lane turns on the engine's own per-request figures


ENGINE_FACTS: Mapping[str, EngineFacts] = MappingProxyType(
    {
        "vllm": EngineFacts(
            kind="vllm",
            name="vLLM",
            runtime="docker",
            model_format="hf",
            nodes="ranks",
            parallel=ParallelFlags(
                tp=("--tensor-parallel-size", "-tp"),
                pp=("--pipeline-parallel-size", "-pp"),
                dp=("--data-parallel-size", "-dp"),
                ep=("--enable-expert-parallel", "-ep"),
                ep_switch=True,
            ),
            flexible_flags=True,
            request_metrics=RequestMetricsFlags(
                timing=("--enable-per-request-metrics",),
                spec=("--per-request-spec-decode-metrics", "summary"),
                spec_needs="--speculative-config",
            ),
        ),
        "sglang": EngineFacts(
            kind="sglang",
            name="SGLang",
            runtime="docker",
            model_format="hf",
            nodes="ranks",
            parallel=ParallelFlags(
                # --tp-size first: SGLang's --help lists --tp-size and --tensor-parallel-size, not --tp (which
                # argparse takes as an abbreviation); a recipe's own --tp still counts for the rule.
                tp=("--tp-size", "--tp", "--tensor-parallel-size"),
                pp=("--pp-size", "--pipeline-parallel-size"),
                dp=("--dp-size", "--dp", "--data-parallel-size"),
                ep=("--ep-size", "--ep", "--expert-parallel-size"),
                dp_inside_tp=("--enable-dp-attention",),
            ),
            flexible_flags=False,
            request_metrics=RequestMetricsFlags(),
        ),
        "llamacpp": EngineFacts(
            kind="llamacpp",
            name="llama-cpp-python",
            runtime="process",
            model_format="gguf",
            nodes="one",
            parallel=ParallelFlags(),
            flexible_flags=False,
            request_metrics=RequestMetricsFlags(),
        ),
        "sim": EngineFacts(
            kind="sim",
            name="simulator",
            runtime="process",
            model_format=None,
            nodes="replicas",
            parallel=ParallelFlags(),
            flexible_flags=False,
            # the simulator's settings of the same names (it refuses the spec one without speculation itself)
            request_metrics=RequestMetricsFlags(
                timing=("--enable-per-request-metrics",),
                spec=("--per-request-spec-decode-metrics", "summary"),
                spec_needs="",
            ),
        ),
    }
)
ENGINE_KINDS = tuple(ENGINE_FACTS)


def engine_facts(kind: str) -> EngineFacts:
    """The row of an engine kind; an unknown kind is an error, never a silent default."""
    try:
        return ENGINE_FACTS[kind]
    except KeyError:
        raise ValueError(f"unknown engine kind {kind!r} (known: {', '.join(ENGINE_KINDS)})") from None
