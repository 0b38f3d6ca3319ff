"""The compute side: FLOPs per prefill token and the prefill ceiling they set (docs/roofline.md, "Prefill").

Prefill of a long prompt waits on arithmetic, not memory: each token costs about two FLOPs per weight it
passes (a multiply and an add), plus attention to the tokens before it. Counted from the same placed tensors
as the decode bytes; FP4 experts hold two values a byte, scales are not weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from labkit.roofline.model import ModelShape, Placed

_SCALES = (".scale", "_scale", ".scales", "scale_inv")


def _values(p: Placed, shape: ModelShape) -> float:
    """The weight values of one tensor (0 for a quantisation scale)."""
    if p.tensor.name.endswith(_SCALES):
        return 0.0
    packed = p.part in ("routed", "draft_routed") and p.tensor.dtype in ("I8", "U8")
    return float(p.tensor.elements * (shape.expert_values_per_byte if packed else 1))


@dataclass(frozen=True)
class PrefillCost:
    """FLOPs one prompt token costs at prompt length P: the weights it passes and its attention."""

    active_values: float  # weight values one token passes (its top-k experts, not all)
    attention_width: float  # query-key width summed over layers (heads x head dim x layers)
    attended: float  # positions one token attends to on average (P / 2 causal, capped by a sparse top-k)

    @property
    def flops(self) -> float:
        # 2 per weight value; attention: scores and the weighted sum, 2 FLOPs each per position and width
        return 2 * self.active_values + 4 * self.attention_width * self.attended


def active_values(placed: Sequence[Placed], shape: ModelShape) -> float:
    """Weight values one token passes: every dense, shared and head value, k of E routed experts, one
    embedding row (a lookup: no FLOPs), no draft heads (prefill does not draft)."""
    dense = sum(_values(p, shape) for p in placed if p.part in ("dense", "shared", "head"))
    routed = sum(_values(p, shape) for p in placed if p.part == "routed")
    share = shape.experts_per_token / shape.routed_experts if shape.routed_experts else 0.0
    head = 0.0
    if shape.tied and not any(p.part == "head" for p in placed):
        head = sum(_values(p, shape) for p in placed if p.part == "embedding")
    return dense + routed * share + head


def prefill_cost(placed: Sequence[Placed], shape: ModelShape, prompt: int, config: dict) -> PrefillCost:
    """The cost of one token of a `prompt`-token prefill (`config`: the model's config.json)."""
    text = config.get("text_config") or config
    heads = int(text.get("num_attention_heads") or 0)
    head_dim = int(text.get("head_dim") or (shape.hidden // heads if heads else 0))
    attended = prompt / 2
    if shape.attention_topk:
        attended = min(attended, shape.attention_topk)
    return PrefillCost(active_values(placed, shape), heads * head_dim * shape.layers, attended)
