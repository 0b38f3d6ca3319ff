"""The model's shape as the roofline needs it, from config.json, and each tensor's part in a decode step.

A tensor's part says how often a step reads it (docs/roofline.md, "Bytes per decode step"): the dense part on
every step; a routed expert only when a token routes to it; the embedding one row per token; an Engram table a
few rows per token, from disk rather than GPU memory; the draft heads once per draft pass; the vision tower
never while decoding text. The names follow the Hugging Face (`model.layers.N.mlp.experts.E...`) and the
DeepSeek release (`layers.N.ffn.experts.E...`) conventions; a fused expert tensor (experts first) is split evenly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from labkit.errors import LabkitError
from labkit.roofline.headers import Tensor

_EXPERT = re.compile(r"(?:^|\.)experts\.(\d+)\.")
_FUSED = re.compile(r"(?:^|\.)experts\.(?!\d)")
_LAYER = re.compile(r"(?:^|\.)(?:layers|mtp)\.(\d+)\.")  # a backbone layer, or a draft stage


class ModelShapeError(LabkitError):
    """A config.json without what the roofline needs; names the file and the key."""


@dataclass(frozen=True)
class ModelShape:
    """What config.json says about a decode step's reads."""

    layers: int
    hidden: int
    vocab: int
    routed_experts: int = 0  # per layer; 0: a dense model
    experts_per_token: int = 0
    draft_experts: int = 0  # the draft heads' own routed experts (DSpark: dspark_n_routed_experts)
    draft_experts_per_token: int = 0
    kv_bytes_per_token: float = 0.0  # the KV cache of all layers, per token of context, at the model's dtype
    kv_note: str = ""
    engram_rows_per_token: int = 0  # table rows one token looks up, over all Engram layers
    tied: bool = False  # tie_word_embeddings: the head is the embedding matrix, read whole each step
    kv_heads: int = 1  # KV heads (1 for MLA's latent): how far tensor parallelism can split the cache
    attention_topk: int = 0  # index_topk: a sparse attention reads at most this many positions per layer
    expert_values_per_byte: int = 1  # 2 when the routed experts are FP4 packed two to a byte (expert_dtype)

    @classmethod
    def from_config(
        cls,
        config: dict[str, Any],
        where: str,
        kv_dtype_bytes: float | None = None,
        kv_stated: tuple[float, str] | None = None,
    ) -> ModelShape:
        """The shape from a config.json (a multimodal one's `text_config`); `kv_dtype_bytes` as the engine
        stores its KV cache (None: 2 bytes), unless the digest states the cache per token (`kv_stated`: bytes
        and where the figure comes from)."""
        text = config.get("text_config") or config
        quant = config.get("quantization_config") or text.get("quantization_config") or {}

        def need(key: str) -> int:
            value = text.get(key)
            if not isinstance(value, int) or value < 1:
                raise ModelShapeError(f"{where}: {key} is {value!r}, expected a positive integer")
            return value

        layers = need("num_hidden_layers")
        experts = int(
            text.get("n_routed_experts") or text.get("num_experts") or text.get("num_local_experts") or 0
        )
        kv, note = kv_stated or _kv_per_token(text, layers, kv_dtype_bytes)
        engram = tuple(int(x) for x in text.get("engram_layer_ids") or ())
        per_layer = (int(text.get("engram_max_ngram_size") or 1) - 1) * int(text.get("engram_n_heads") or 0)
        return cls(
            layers=layers,
            hidden=need("hidden_size"),
            vocab=need("vocab_size"),
            routed_experts=experts,
            experts_per_token=int(text.get("num_experts_per_tok") or 0) if experts else 0,
            # a DSpark drafter has experts of its own; an MTP layer (DeepSeek-V3) routes like the backbone
            draft_experts=int(text.get("dspark_n_routed_experts") or experts),
            draft_experts_per_token=int(
                text.get("dspark_num_experts_per_tok")
                or (text.get("num_experts_per_tok") or 0 if experts else 0)
            ),
            kv_bytes_per_token=kv,
            kv_note=note,
            engram_rows_per_token=per_layer * len(engram),
            tied=bool(text.get("tie_word_embeddings")),
            kv_heads=1
            if text.get("kv_lora_rank")
            else int(text.get("num_key_value_heads") or text.get("num_attention_heads") or 1),
            attention_topk=int(text.get("index_topk") or 0),
            expert_values_per_byte=2 if quant.get("expert_dtype") == "fp4" else 1,
        )


def _kv_per_token(text: dict[str, Any], layers: int, dtype_bytes: float | None) -> tuple[float, str]:
    """KV cache bytes per token of context over all layers, and how the figure was made."""
    width = 2 if dtype_bytes is None else dtype_bytes
    if text.get("kv_lora_rank"):  # MLA: one latent vector and its rope part per token and layer
        per = int(text["kv_lora_rank"]) + int(text.get("qk_rope_head_dim") or 0)
        return layers * per * width, f"MLA latent {per} x {layers} layers x {width} B"
    heads = int(text.get("num_key_value_heads") or text.get("num_attention_heads") or 0)
    head_dim = int(
        text.get("head_dim")
        or (int(text.get("hidden_size", 0)) // max(int(text.get("num_attention_heads") or 1), 1))
    )
    return (
        2 * layers * heads * head_dim * width,
        f"K and V, {heads} heads x {head_dim} x {layers} layers x {width} B",
    )


@dataclass(frozen=True)
class Placed:
    """A tensor with its part, and its layer and expert where it has them."""

    tensor: Tensor
    part: str
    layer: int | None = None
    expert: int | None = None


def place(t: Tensor, shape: ModelShape) -> Placed:
    """The part of one tensor (module docstring)."""
    n = t.name
    layer_m = _LAYER.search(n)
    layer = int(layer_m.group(1)) if layer_m else None
    expert_m = _EXPERT.search(n)
    expert = int(expert_m.group(1)) if expert_m else None
    draft = n.startswith(("mtp.", "model.mtp.")) or (layer is not None and layer >= shape.layers)
    if n.startswith(("vision", "aligner", "model.vision", "visual", "image_")):
        return Placed(t, "vision", layer)
    if "engram." in n and ".embed." in n:
        return Placed(t, "engram", layer)
    if expert is not None or (_FUSED.search(n) and "shared" not in n):
        return Placed(t, "draft_routed" if draft else "routed", layer, expert)
    if draft:
        return Placed(t, "draft", layer)
    if "shared_expert" in n:
        return Placed(t, "shared", layer)
    if n in ("embed.weight", "model.embed_tokens.weight", "embed_tokens.weight", "tok_embeddings.weight"):
        return Placed(t, "embedding")
    if n in ("head.weight", "lm_head.weight", "output.weight"):
        return Placed(t, "head")
    return Placed(t, "dense", layer)
