"""Headers-only safetensors files: a checkpoint that is not here stands in as its headers alone, which is all
the roofline reads (labkit/roofline/headers.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from labkit.roofline.headers import Tensor


def header_bytes(tensors: Iterable[Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """A length-prefixed header for these tensors (byte ranges back to back in name order): what a
    headers-only file needs, to stand in for a checkpoint that is not here."""
    doc: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    for t in sorted(tensors, key=lambda t: t.name):
        doc[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    text = json.dumps(doc, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text
