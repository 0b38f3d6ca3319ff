"""A tiny random-weight llama GGUF that labkit builds itself, so a real engine (llama-cpp-python) runs offline.

Nothing is downloaded: the byte-level BPE tokenizer is trained on a fixed list of Python standard-library
source files of the running interpreter (labkit.tinymodel.inputs, .tokenizer), the weights come from a seeded
PCG64 stream (labkit.tinymodel.weights), labkit.tinymodel.write writes the file. This module is the cache
around them, and keeps the names of the former single-module builder (`from labkit.tinymodel import build`).

Built models live in the cache (`$LABKIT_CACHE/models`, default `~/.cache/labkit/models`) as
`<name>-<key>.gguf` plus a `.json` sidecar (spec, text hashes, versions, file sha256). Writes are atomic
(temp file + rename), so a crashed build leaves no half file and concurrent builders agree.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from labkit import settings
from labkit.tinymodel.inputs import cache_key, corpus, versions
from labkit.tinymodel.spec import (
    ModelBuildError,
    TinySpec,
    preset,
)
from labkit.tinymodel.write import build


def cache_dir() -> Path:
    """Where built models go: $LABKIT_CACHE/models, else ~/.cache/labkit/models."""
    root = settings.current().cache
    return (Path(root) if root else Path.home() / ".cache" / "labkit") / "models"


def model_path(spec: TinySpec, root: Path | None = None, texts: list[str] | None = None) -> Path:
    """Where this spec's model lives in the cache (built or not)."""
    texts = corpus() if texts is None else texts
    return (root or cache_dir()) / f"{spec.name}-{cache_key(spec, texts, versions())}.gguf"


def ensure(spec: TinySpec | str, root: Path | None = None, log=sys.stderr) -> Path:
    """The cached model for `spec` (a TinySpec or preset name), built on first use."""
    spec = preset(spec) if isinstance(spec, str) else spec
    texts = corpus()
    path = model_path(spec, root, texts)
    if path.is_file():
        return path
    if log is not None:
        print(f"labkit: building tiny model {spec.name} -> {path}", file=log, flush=True)
    t0 = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=path.parent))  # own folder: concurrent builds agree
    try:
        facts = build(spec, work / path.name, texts)
        facts["build_seconds"] = round(time.monotonic() - t0, 3)
        (work / "facts.json").write_text(json.dumps(facts, indent=2, sort_keys=True))
        # Sidecar first, then the model: a model file in the cache always has its facts beside it.
        os.replace(work / "facts.json", path.with_suffix(".json"))
        os.replace(work / path.name, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if log is not None:
        print(
            f"labkit: built {path.name} ({facts['bytes'] / 2**20:.1f} MiB, {facts['build_seconds']} s)",
            file=log,
            flush=True,
        )
    return path


def facts(path: Path) -> dict[str, Any] | None:
    """The sidecar facts of a cached model, if present."""
    side = Path(path).with_suffix(".json")
    return json.loads(side.read_text()) if side.is_file() else None


def materialize(plan, root: Path | None = None, log=sys.stderr, build: bool = True):
    """The plan with model.path set to the built tiny model when model.repo names one; else unchanged.

    labkit.lab and the CLI call this before launching a lane, so the recipe needs no machine-specific path.
    `build=False` only computes where the model would be (for showing commands); without the
    'llamacpp' extra the plan is then returned unchanged.
    """
    if not plan.wants_built_model:  # the rule serve refuses unbuilt models by (labkit.recipe)
        return plan
    if not plan.cluster.is_local:
        raise ModelBuildError(
            f"{plan.file}: model.repo {plan.model.repo} is built on this machine only; use "
            'cluster.nodes = ["localhost"] or give model.path'
        )
    if build:
        path = ensure(plan.model.repo, root, log)
    else:
        try:
            path = model_path(preset(plan.model.repo), root)
        except ModelBuildError:
            return plan
    return dataclasses.replace(plan, model=dataclasses.replace(plan.model, path=str(path)))
