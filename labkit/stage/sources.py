"""The source facts every node's copies are judged against: per local file, the size, blob name, xxh3_64 of
each sampled block (hashed here from the raw blocks one node sent) and a digest of the raw samples, with which
each node's own reading of the shared cache is compared (a node seeing another cache is caught).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import xxhash

from labkit.errors import LabkitError
from labkit.recipe import StagingSpec
from labkit.stage.node import script as node_side


def sample_hashes(raw_b64: str, size: int, block: int, count: int) -> list[str]:
    """xxh3_64 hex digest of each sampled block (the blocks come concatenated from the node)."""
    raw = base64.b64decode(raw_b64)
    offsets = node_side.sample_offsets(size, block, count)
    lengths = node_side.block_lengths(size, offsets, block)
    if sum(lengths) != len(raw):
        raise LabkitError(f"sampled bytes: got {len(raw)}, expected {sum(lengths)} for a {size}-byte file")
    out, pos = [], 0
    for n in lengths:
        out.append(xxhash.xxh3_64_hexdigest(raw[pos : pos + n]))
        pos += n
    return out


@dataclass(frozen=True)
class Source:
    """One local file as found in the shared cache: size, xxh3_64 of each sampled block, digest of the raw
    samples (to compare what each node read), whole-file hash in full mode, the blob it resolves to."""

    size: int
    hashes: tuple[str, ...]
    digest: str
    full: str | None
    blob: str | None = None


def sources_from(probes: list[dict], spec: StagingSpec, block: int, count: int) -> dict[str, Source]:
    """The source facts of each local file, from whichever probe carried its raw sampled blocks."""
    out = {}
    for name in spec.local:
        for probe in probes:
            src = probe["sources"].get(name)
            if src is not None and "samples" in src:
                out[name] = Source(
                    src["size"],
                    tuple(sample_hashes(src["samples"], src["size"], block, count)),
                    src["digest"],
                    src.get("full"),
                    src.get("blob"),
                )
                break
        else:
            if all(name in p["sources"] for p in probes):
                raise LabkitError(f"{probes[0]['node']}: no probe returned the sampled blocks of {name}")
    return out
