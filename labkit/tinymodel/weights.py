"""The tiny model's seeded random weights, with the "constant channel" that carries each token's logit bias.

The weights carry a "constant channel" (docs/tinymodel.md, "The constant channel"): channel 0 of every embedding is 1 and no layer
writes to it, so column 0 of `output.weight` is a per-token logit bias. That bias removes every token that
would break the "one token per SSE chunk" property (labkit.tinymodel.tokenizer.suppressed) and, by default,
EOS, so `max_tokens=N` streams exactly N content chunks.

Weights avoid numpy's distribution code (whose streams may change between numpy versions): they are scaled
24-bit integers taken from PCG64's raw output, which numpy keeps stable, and every step is exact IEEE
arithmetic.
"""

from __future__ import annotations

import math
from typing import Any

from labkit.tinymodel.spec import EOS_ID, SUPPRESS_BIAS, TinySpec


class _Stream:
    """Uniform weights from PCG64's raw 64-bit output: exact arithmetic, stable across numpy versions."""

    def __init__(self, seed: int):
        import numpy as np

        self.np = np
        self.bits = np.random.PCG64(seed)

    def uniform(self, shape: tuple[int, ...], std: float) -> Any:
        np = self.np
        n = math.prod(shape)
        raw = self.bits.random_raw(n).astype(np.uint64)
        k = (raw >> np.uint64(40)).astype(np.float64)  # 24-bit integers, exact in float64
        u = (k + 0.5) / float(1 << 23) - 1.0  # symmetric in (-1, 1), exact
        return (u * (std * math.sqrt(3.0))).astype(np.float32).reshape(shape)  # uniform with this std


def logit_bias(spec: TinySpec, supp: list[bool]) -> Any:
    """Per-token logit bias (float32 array): SUPPRESS_BIAS for suppressed tokens, spec.eos_bias for EOS."""
    import numpy as np

    bias = np.zeros(spec.vocab, dtype=np.float32)
    bias[np.array(supp)] = SUPPRESS_BIAS
    bias[EOS_ID] = spec.eos_bias
    return bias


def weights(spec: TinySpec, bias: Any) -> dict[str, Any]:
    """name -> float32 array ([out, in] as numpy sees it), in a fixed order."""
    np_ = _Stream(spec.seed)
    E, F, V = spec.embedding, spec.ff, spec.vocab
    kv = spec.kv_heads * spec.head_dim
    small = 0.1 / math.sqrt(E)
    out: dict[str, Any] = {}
    emb = np_.uniform((V, E), 1.0)
    emb[:, 0] = 1.0  # the constant channel
    out["token_embd.weight"] = emb
    ones = np_.np.ones(E, dtype=np_.np.float32)
    for n in range(spec.layers):
        out[f"blk.{n}.attn_norm.weight"] = ones.copy()
        out[f"blk.{n}.attn_q.weight"] = np_.uniform((E, E), 1 / math.sqrt(E))
        out[f"blk.{n}.attn_k.weight"] = np_.uniform((kv, E), 1 / math.sqrt(E))
        out[f"blk.{n}.attn_v.weight"] = np_.uniform((kv, E), 1 / math.sqrt(E))
        o = np_.uniform((E, E), small)
        o[0, :] = 0.0  # no layer writes channel 0
        out[f"blk.{n}.attn_output.weight"] = o
        out[f"blk.{n}.ffn_norm.weight"] = ones.copy()
        out[f"blk.{n}.ffn_gate.weight"] = np_.uniform((F, E), 1 / math.sqrt(E))
        out[f"blk.{n}.ffn_up.weight"] = np_.uniform((F, E), 1 / math.sqrt(E))
        d = np_.uniform((E, F), small)
        d[0, :] = 0.0
        out[f"blk.{n}.ffn_down.weight"] = d
    out["output_norm.weight"] = ones.copy()
    head = np_.uniform((V, E), 1.5 / math.sqrt(E))
    head[:, 0] = 0.0
    fixed = bias != 0.0
    head[fixed, :] = 0.0  # a suppressed token's logit is its bias times the (positive) channel 0
    head[:, 0] += bias
    out["output.weight"] = head
    return out
