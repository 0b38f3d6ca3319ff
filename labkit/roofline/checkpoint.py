"""A lane's checkpoint facts beside its recipe: `checkpoint/config.json` and the header digest, as
`digest.json` (`HeaderDigest.to_json` of the real headers, `read_folder`) or `tensors.toml` (a compact form
committed by hand from published shapes, for a checkpoint that is not here)."""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.roofline.headers import HeaderDigest, HeaderError, expand_compact
from labkit.roofline.model import ModelShape, Placed, place

FOLDER = "checkpoint"


@dataclass(frozen=True)
class Checkpoint:
    """The digest and config of one checkpoint, and every tensor placed in its part."""

    digest: HeaderDigest
    config: dict[str, Any]
    shape: ModelShape
    placed: tuple[Placed, ...]

    @classmethod
    def of(
        cls, digest: HeaderDigest, config: dict[str, Any], where: Path, kv_dtype_bytes: float | None = None
    ) -> Checkpoint:
        stated = (digest.kv_bytes_per_token, digest.kv_note) if digest.kv_bytes_per_token else None
        shape = ModelShape.from_config(config, str(where / "config.json"), kv_dtype_bytes, stated)
        return cls(digest, config, shape, tuple(place(t, shape) for t in digest.tensors))


def load_checkpoint(folder: Path, kv_dtype_bytes: float | None = None) -> Checkpoint | None:
    """The checkpoint facts in `folder` (a recipe's checkpoint/), None when there are none; HeaderError naming
    the file when they do not read."""
    config_file = folder / "config.json"
    digests = [p for p in (folder / "digest.json", folder / "tensors.toml") if p.is_file()]
    if not config_file.is_file() or not digests:
        return None
    try:
        config = json.loads(config_file.read_text())
        if digests[0].suffix == ".json":
            digest = HeaderDigest.from_json(json.loads(digests[0].read_text()), str(digests[0]))
        else:
            digest = expand_compact(tomllib.loads(digests[0].read_text()), str(digests[0]))
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise HeaderError(f"{folder}: {e}")
    return Checkpoint.of(digest, config, folder, kv_dtype_bytes)
