"""What a model's bytes depend on besides its spec: the training text and the tool versions (pure reads).

The training text is identical on machines with the same CPython release (unpatched stdlib files); the cache
key hashes the text itself, so a machine with other text builds (and caches) its own model instead of reusing
a wrong one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
import sysconfig
from pathlib import Path

from labkit.tinymodel.spec import BUILDER_VERSION, FORMATS, HF_WRITER_VERSION, ModelBuildError, TinySpec

# Training text: stdlib files of the running interpreter, sorted, each capped (about 420 KB in all).
CORPUS_FILES = ("argparse.py", "difflib.py", "pydoc_data/topics.py", "textwrap.py")
CORPUS_CAP_CHARS = 160_000


def corpus_files(stdlib: Path | None = None) -> list[Path]:
    root = Path(stdlib or sysconfig.get_paths()["stdlib"])
    files = [root / rel for rel in sorted(CORPUS_FILES)]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ModelBuildError(
            f"tiny model training text missing: {', '.join(missing)} "
            f"(Python {sys.version.split()[0]} stdlib at {root})"
        )
    return files


def corpus(stdlib: Path | None = None) -> list[str]:
    """The training text, one string per file, in a fixed order."""
    return [f.read_text(encoding="utf-8")[:CORPUS_CAP_CHARS] for f in corpus_files(stdlib)]


def versions(fmt: str = "gguf") -> dict[str, str]:
    """The versions a model's bytes depend on, by format: "gguf" needs the 'llamacpp' extra (gguf,
    tokenizers); "hf" needs only numpy and tokenizers, and carries a format marker and the HF writer's
    version instead of gguf's. ModelBuildError names what is missing."""
    from importlib.metadata import version

    if fmt not in FORMATS:
        raise ModelBuildError(f"no tiny model format '{fmt}'; known: {', '.join(FORMATS)}")
    try:
        import numpy  # noqa: F401
        import tokenizers

        if fmt == "gguf":
            import gguf  # noqa: F401
    except ImportError as e:
        need = (
            "the 'llamacpp' extra (pip install -e '.[llamacpp]')" if fmt == "gguf" else "numpy and tokenizers"
        )
        raise ModelBuildError(f"building the tiny model ({fmt}) needs {need}: {e}")
    if fmt == "gguf":  # the key of the GGUFs built before the HF format existed: keep it
        return {
            "tokenizers": tokenizers.__version__,
            "gguf": version("gguf"),
            "builder": str(BUILDER_VERSION),
        }
    return {
        "format": "hf",
        "tokenizers": tokenizers.__version__,
        "builder": str(BUILDER_VERSION),
        "hf_writer": str(HF_WRITER_VERSION),
    }


def text_hashes(texts: list[str]) -> list[str]:
    """sha256 of each training text (in the cache key and the sidecar facts)."""
    return [hashlib.sha256(t.encode()).hexdigest() for t in texts]


def cache_key(spec: TinySpec, texts: list[str], versions: dict[str, str]) -> str:
    """Content hash of everything the bytes depend on."""
    blob = json.dumps(
        {"spec": dataclasses.asdict(spec), "versions": versions, "text": text_hashes(texts)}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
