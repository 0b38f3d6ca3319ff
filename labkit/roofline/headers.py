"""What a checkpoint holds, from its safetensors headers alone: every tensor's name, dtype and shape.

A safetensors file starts with an 8-byte little-endian length and a JSON header naming each tensor's dtype,
shape and byte range; the weights follow. Reading the header costs kilobytes however large the file is, so
the roofline (docs/roofline.md) can count the bytes of a 476 GB checkpoint without reading one weight.
The digest is the part of the headers the model needs, small enough to commit beside a recipe.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError

# bits per element of each safetensors dtype; the sub-byte float types pack several elements per byte
DTYPE_BITS = {
    "F64": 64,
    "I64": 64,
    "U64": 64,
    "F32": 32,
    "I32": 32,
    "U32": 32,
    "F16": 16,
    "BF16": 16,
    "I16": 16,
    "U16": 16,
    "I8": 8,
    "U8": 8,
    "BOOL": 8,
    "F8_E4M3": 8,
    "F8_E5M2": 8,
    "F8_E8M0": 8,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "F4": 4,
}
MAX_HEADER = 100 * 2**20  # a header this large is not a safetensors header (the format caps it at 100 MB)
DIGEST_VERSION = 1


class HeaderError(LabkitError):
    """A file whose header is not a safetensors header, or a digest that does not read; names the file."""


@dataclass(frozen=True)
class Tensor:
    """One tensor as its header states it."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Its bytes in the file: elements x bits, rounded up to a whole byte."""
        return -(-self.elements * DTYPE_BITS[self.dtype] // 8)


@dataclass(frozen=True)
class HeaderDigest:
    """The tensors of a checkpoint (every file's, by file) and where their names and shapes come from."""

    files: dict[str, tuple[Tensor, ...]]
    source: str
    # the KV cache per token of context, where the config cannot say it (a compressed or quantised cache)
    kv_bytes_per_token: float | None = None
    kv_note: str = ""

    @property
    def tensors(self) -> tuple[Tensor, ...]:
        return tuple(t for name in sorted(self.files) for t in self.files[name])

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": DIGEST_VERSION,
            "source": self.source,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_note": self.kv_note,
            "files": {
                name: [[t.name, t.dtype, list(t.shape)] for t in tensors]
                for name, tensors in sorted(self.files.items())
            },
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> HeaderDigest:
        """A digest from its JSON form; HeaderError naming `where` (the file) and what is wrong."""
        if not isinstance(data, dict) or data.get("version") != DIGEST_VERSION:
            raise HeaderError(f"{where}: not a header digest of version {DIGEST_VERSION}")
        files: dict[str, tuple[Tensor, ...]] = {}
        for fname, rows in (data.get("files") or {}).items():
            try:
                files[fname] = tuple(_tensor(n, d, s) for n, d, s in rows)
            except (TypeError, ValueError) as e:
                raise HeaderError(f"{where}: file {fname}: {e}")
        kv = data.get("kv_bytes_per_token")
        return cls(
            files, str(data.get("source") or ""), float(kv) if kv else None, str(data.get("kv_note") or "")
        )


def _tensor(name: Any, dtype: Any, shape: Any) -> Tensor:
    if dtype not in DTYPE_BITS:
        raise ValueError(f"tensor {name}: unknown dtype {dtype!r} (known: {', '.join(DTYPE_BITS)})")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError(f"tensor {name}: shape {shape!r} is not a list of sizes")
    return Tensor(str(name), str(dtype), tuple(shape))


def parse_header(text: bytes, where: str) -> tuple[Tensor, ...]:
    """The tensors of one header (its JSON, without the length prefix), each checked against its byte range."""
    try:
        doc = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HeaderError(f"{where}: the header is not JSON ({e})")
    if not isinstance(doc, dict):
        raise HeaderError(f"{where}: the header is not a JSON object")
    out = []
    for name, entry in doc.items():
        if name == "__metadata__":
            continue
        try:
            t = _tensor(name, entry.get("dtype"), entry.get("shape"))
        except (AttributeError, ValueError) as e:
            raise HeaderError(f"{where}: {e}")
        begin, end = entry.get("data_offsets") or (0, None)
        if end is not None and end - begin != t.nbytes:
            raise HeaderError(
                f"{where}: tensor {name} spans {end - begin} bytes, its dtype and shape {t.nbytes}"
            )
        out.append(t)
    return tuple(sorted(out, key=lambda t: t.name))


def header_of(path: Path) -> bytes:
    """The JSON header of one safetensors file: its first 8 + N bytes, nothing more."""
    with open(path, "rb") as f:
        head = f.read(8)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 0 < n <= MAX_HEADER:
            raise HeaderError(f"{path}: not a safetensors file (header length {n})")
        text = f.read(n)
    if len(text) != n:
        raise HeaderError(f"{path}: the header is cut short ({len(text)} of {n} bytes)")
    return text


def read_folder(folder: Path, source: str) -> HeaderDigest:
    """The digest of every *.safetensors file in a model folder (links followed, as a staged view has them)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise HeaderError(f"{folder}: no *.safetensors files")
    return HeaderDigest({p.name: parse_header(header_of(p), str(p)) for p in files}, source)


def _numbers(spec: Any, ranges: dict[str, Any], where: str) -> list[int]:
    """ "0-39", "2,8,14", or the name of a [ranges] entry holding one, as a list of integers."""
    text = str(ranges.get(spec, spec)) if isinstance(spec, str) else spec
    if isinstance(text, list):
        return [int(x) for x in text]
    out: list[int] = []
    try:
        for part in str(text).split(","):
            lo, _, hi = part.strip().partition("-")
            out += list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise HeaderError(f'{where}: {spec!r} is not a list of numbers like "0-39" or "2,8,14"')
    return out


def expand_compact(data: dict[str, Any], where: str) -> HeaderDigest:
    """A digest from its compact form (a committed tensors.toml): [[tensors]] blocks of rows [name, dtype,
    shape], a name's {L} taken over the block's `layers` and its {E} over its `experts`."""
    ranges = data.get("ranges") or {}
    tensors: list[Tensor] = []
    for i, block in enumerate(data.get("tensors") or ()):
        at = f"{where}: tensors[{i}]"
        layers = _numbers(block["layers"], ranges, at) if "layers" in block else [None]
        experts = _numbers(block["experts"], ranges, at) if "experts" in block else [None]
        for name, dtype, shape in block.get("rows") or ():
            for layer in layers if "{L}" in name else [None]:
                for expert in experts if "{E}" in name else [None]:
                    full = name.replace("{L}", str(layer)).replace("{E}", str(expert))
                    try:
                        tensors.append(_tensor(full, dtype, shape))
                    except ValueError as e:
                        raise HeaderError(f"{at}: {e}")
    names = [t.name for t in tensors]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})[:3]
        raise HeaderError(f"{where}: tensors named twice: {', '.join(dup)}")
    head = data.get("digest") or {}
    kv = head.get("kv_bytes_per_token")
    return HeaderDigest(
        {Path(where).name: tuple(sorted(tensors, key=lambda t: t.name))},
        str(head.get("source") or where),
        kv_bytes_per_token=float(kv) if kv else None,
        kv_note=str(head.get("kv_note") or ""),
    )
