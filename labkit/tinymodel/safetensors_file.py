"""A BF16 safetensors file written by hand (numpy and json only; no torch, no `safetensors` package).

Layout (docs/tinymodel.md, "The HF format"): an 8-byte little-endian header length, a JSON header (each
tensor's dtype, shape and [begin, end) byte offsets into the data, plus `"__metadata__": {"format": "pt"}`,
padded with spaces to a multiple of 8), then the tensors' bytes back to back in sorted name order.
Float32 becomes BF16 by round-to-nearest-even on the bit pattern, so the bytes are exact and reproducible.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METADATA = {"format": "pt"}  # what torch-saved files carry; transformers and vLLM read "pt" files


def bf16_bits(array: Any) -> Any:
    """The BF16 bit patterns (uint16, same shape) nearest to a float32 array, ties to even; NaN stays NaN."""
    import numpy as np

    a = np.ascontiguousarray(array, dtype=np.float32)
    bits = a.view(np.uint32).astype(np.uint64)  # room for the carry out of the low half
    keep_lsb = (bits >> np.uint64(16)) & np.uint64(1)
    rounded = ((bits + np.uint64(0x7FFF) + keep_lsb) >> np.uint64(16)).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():  # rounding could carry a NaN's payload into the exponent; keep a quiet NaN of its sign
        rounded[nan] = ((bits[nan] >> np.uint64(16)) | np.uint64(0x0040)).astype(np.uint16)
    return rounded


def bf16_to_float32(bits: Any) -> Any:
    """BF16 bit patterns (uint16) back to float32: exact (BF16 is float32 with the low 16 bits zero)."""
    import numpy as np

    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def header(shapes: dict[str, tuple[int, ...]]) -> bytes:
    """The length-prefixed, space-padded JSON header for BF16 tensors of these shapes, in sorted name order."""
    entries: dict[str, Any] = {"__metadata__": METADATA}
    offset = 0
    for name in sorted(shapes):
        size = 2 * math.prod(shapes[name])
        entries[name] = {
            "dtype": "BF16",
            "shape": list(shapes[name]),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    text = json.dumps(entries, separators=(",", ":"), sort_keys=True).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return len(text).to_bytes(8, "little") + text


def write_bf16(path: Path, tensors: dict[str, Any]) -> int:
    """Write float32 arrays as one BF16 safetensors file (sorted by name); returns its size in bytes."""
    shapes = {name: tuple(int(d) for d in a.shape) for name, a in tensors.items()}
    size = 0
    with open(path, "wb") as f:
        size += f.write(header(shapes))
        for name in sorted(tensors):
            size += f.write(bf16_bits(tensors[name]).astype("<u2").tobytes())
    return size


def read_header(path: Path) -> tuple[dict[str, Any], int]:
    """(the JSON header, where the data starts) of a safetensors file."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)), 8 + n
