"""What serve keeps on this machine between runs: the device probes' and the fabric's answers in labkit's cache
(`<cache>/probes`), and the checkpoint facts beside a recipe, each written whole or not at all."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from labkit import settings


def probes_dir() -> Path:
    """$LABKIT_CACHE/probes, else ~/.cache/labkit/probes."""
    return settings.cache_root() / "probes"


def write_whole(path: Path, text: str) -> None:
    """`text` into `path` through a temp file beside it and a rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
