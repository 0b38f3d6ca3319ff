"""Bytes one decode step reads, per GPU and over the fabric, and the ceiling they set (docs/roofline.md).

Decode of a large model waits on memory: each step reads every dense weight once, the routed experts its
tokens pick, the KV cache of every running sequence, and, over the fabric, the activations tensor and expert
parallelism exchange. Pure arithmetic over the tensors' parts (labkit.roofline.model); no I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from labkit.roofline.model import ModelShape, Placed

ACTIVATION_BYTES = 2  # BF16 activations on the wire (the all-reduce and all-to-all payloads)


@dataclass(frozen=True)
class StepInputs:
    """One decode step: how many sequences, how many positions each (K + 1 in a speculative verify step), at
    what context, and how many forward passes the draft heads make per step (0 without speculation)."""

    sequences: int = 1
    positions: int = 1
    context: int = 0
    draft_passes: int = 0

    @property
    def tokens(self) -> int:
        return self.sequences * self.positions


@dataclass(frozen=True)
class Parallel:
    """How the lane spreads the model: tensor and expert parallelism over `gpus` GPUs in all."""

    tp: int = 1
    ep: int = 1
    gpus: int = 1


@dataclass(frozen=True)
class StepBytes:
    """What one step reads: GPU memory by part, Engram table rows (from disk or the NAS, apart), and the
    experts a layer touches on average."""

    parts: dict[str, float]
    engram: float
    experts_touched: float
    inputs: StepInputs
    notes: tuple[str, ...] = field(default=())

    @property
    def total(self) -> float:
        return sum(self.parts.values())


def distinct_experts(experts: int, per_token: int, tokens: int) -> float:
    """Experts one layer touches when `tokens` tokens each pick `per_token` of `experts`, routing uniform and
    independent: E (1 - (1 - k/E)^b). Real routing is skewed and a sequence's neighbouring tokens agree, so
    fewer are touched (docs/roofline.md, "Where the model is approximate")."""
    if not experts or not per_token:
        return 0.0
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


def _sum(placed: Sequence[Placed], part: str) -> float:
    return float(sum(p.tensor.nbytes for p in placed if p.part == part))


def _per_expert(placed: Sequence[Placed], part: str, experts: int) -> tuple[float, int]:
    """(bytes of one expert on average, layers that have experts) of a routed part; experts stacked in one
    tensor per layer (no index in the name) are counted by the config's number of experts."""
    mine = [p for p in placed if p.part == part]
    layers = len({p.layer for p in mine})
    indexed = {(p.layer, p.expert) for p in mine if p.expert is not None}
    whole = all(p.expert is not None for p in mine)
    count = len(indexed) if whole or not experts else experts * max(layers, 1)
    return (_sum(mine, part) / count, layers) if mine and count else (0.0, 0)


def decode_step(placed: Sequence[Placed], shape: ModelShape, inputs: StepInputs) -> StepBytes:
    """The bytes of one decode step (module docstring), by part."""
    b = inputs.tokens
    expert_bytes, moe_layers = _per_expert(placed, "routed", shape.routed_experts)
    touched = distinct_experts(shape.routed_experts, shape.experts_per_token, b)
    draft_expert, draft_layers = _per_expert(placed, "draft_routed", shape.draft_experts)
    draft_touched = distinct_experts(shape.draft_experts, shape.draft_experts_per_token, b)
    embedding = _sum(placed, "embedding")
    head = _sum(placed, "head") or (embedding if shape.tied else 0.0)
    notes = []
    if shape.attention_topk and inputs.context > shape.attention_topk:
        notes.append(f"KV read counted at the whole cache per token ({shape.kv_note}): an upper bound")
    parts = {
        "dense": _sum(placed, "dense"),
        "shared": _sum(placed, "shared"),
        "routed": expert_bytes * touched * moe_layers,
        "embedding": embedding / shape.vocab * b if embedding else 0.0,
        "head": head,
        "kv": inputs.sequences * inputs.context * shape.kv_bytes_per_token,
        "draft": _sum(placed, "draft") * inputs.draft_passes,
        "draft_routed": draft_expert * draft_touched * draft_layers * inputs.draft_passes,
    }
    rows = sum(p.tensor.shape[0] for p in placed if p.part == "engram" and p.tensor.name.endswith("weight"))
    engram = _sum(placed, "engram") / rows * shape.engram_rows_per_token * b if rows else 0.0
    return StepBytes(parts, engram, touched, inputs, tuple(notes))


def per_gpu(step: StepBytes, shape: ModelShape, par: Parallel) -> float:
    """Bytes the busiest GPU reads, routing balanced: every weight split over the TP group, the routed experts
    over all GPUs, the KV cache over as many TP ranks as there are KV heads (MLA's one latent: not split)."""
    p = step.parts
    weights = p["dense"] + p["shared"] + p["embedding"] + p["head"] + p["draft"] + p["draft_routed"]
    return weights / par.tp + p["routed"] / par.gpus + p["kv"] / min(par.tp, shape.kv_heads)


def collective(step: StepBytes, shape: ModelShape, par: Parallel) -> float:
    """Bytes one GPU sends over the fabric per step: two ring all-reduces per layer under TP (2 (n - 1) / n of
    the activations each), and with EP the MoE layers' all-to-all instead of one of them (each token's hidden
    state to its k experts and back, the share that leaves the GPU)."""
    act = step.inputs.tokens * shape.hidden * ACTIVATION_BYTES
    ring = 2 * (par.tp - 1) / par.tp * act if par.tp > 1 else 0.0
    if par.ep > 1 and shape.routed_experts:
        a2a = 2 * act * shape.experts_per_token * (par.ep - 1) / par.ep / par.ep
        return shape.layers * (ring + a2a)
    return shape.layers * 2 * ring


@dataclass(frozen=True)
class Ceiling:
    """The step time and decode ceiling of one step shape at given bandwidths (bytes/s)."""

    gpu_bytes: float
    fabric_bytes: float
    bandwidth: float
    fabric: float | None
    tokens_per_step: float

    @property
    def memory_s(self) -> float:
        return self.gpu_bytes / self.bandwidth

    @property
    def fabric_s(self) -> float:
        return self.fabric_bytes / self.fabric if self.fabric else 0.0

    @property
    def serial_s(self) -> float:
        return self.memory_s + self.fabric_s

    @property
    def overlapped_s(self) -> float:
        return max(self.memory_s, self.fabric_s)

    @property
    def tps(self) -> float:
        """Tokens per second at the serial step time: the ceiling the lane's figure is a share of."""
        return self.tokens_per_step / self.serial_s

    @property
    def tps_overlapped(self) -> float:
        return self.tokens_per_step / self.overlapped_s


def ceiling(
    step: StepBytes,
    shape: ModelShape,
    par: Parallel,
    bandwidth: float,
    fabric: float | None,
    tau: float = 1.0,
) -> Ceiling:
    """The ceiling of `step` when each sequence keeps `tau` tokens per step (1 without speculation; the
    measured tau, or K + 1 as the bound, with it)."""
    return Ceiling(
        per_gpu(step, shape, par),
        collective(step, shape, par),
        bandwidth,
        fabric,
        step.inputs.sequences * tau,
    )
