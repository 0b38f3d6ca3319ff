"""A tiny random-weight llama that labkit builds itself, so a real engine runs offline: a GGUF for
llama-cpp-python, or an HF model directory for vLLM and SGLang.

Nothing is downloaded: the byte-level BPE tokenizer is trained on a fixed list of Python standard-library
source files of the running interpreter (labkit.tinymodel.inputs, .tokenizer), the weights come from a seeded
PCG64 stream (labkit.tinymodel.weights), labkit.tinymodel.write writes the GGUF and labkit.tinymodel.hf the
HF directory. This module is the cache around them, and keeps the names of the former single-module builder
(`from labkit.tinymodel import build`).

Built models live in the cache (`$LABKIT_CACHE/models`, default `~/.cache/labkit/models`) as
`<name>-<key>.gguf` or the directory `<name>-<key>-hf`, each with a `.json` sidecar (spec, text hashes,
versions, file sha256). Writes are atomic (built in a temp folder, then renamed), so a crashed build leaves
nothing half written and concurrent builders agree.
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
from typing import Any, TextIO

from labkit import settings
from labkit.recipe import LanePlan, engine_facts
from labkit.tinymodel.hf import build_hf
from labkit.tinymodel.inputs import cache_key, corpus, versions
from labkit.tinymodel.spec import (
    ModelBuildError,
    TinySpec,
    preset,
)
from labkit.tinymodel.write import build


def cache_dir() -> Path:
    """Where built models go: $LABKIT_CACHE/models, else ~/.cache/labkit/models."""
    return settings.cache_root() / "models"


def model_path(
    spec: TinySpec, root: Path | None = None, texts: list[str] | None = None, fmt: str = "gguf"
) -> Path:
    """Where this spec's model lives in the cache (built or not): `<name>-<key>.gguf`, or the directory
    `<name>-<key>-hf` for fmt "hf" (its key has a format marker and no gguf version)."""
    texts = corpus() if texts is None else texts
    key = cache_key(spec, texts, versions(fmt))
    return (root or cache_dir()) / (f"{spec.name}-{key}.gguf" if fmt == "gguf" else f"{spec.name}-{key}-hf")


def sidecar(path: Path) -> Path:
    """The facts file beside a cached model: x.gguf -> x.json, directory x-hf -> x-hf.json."""
    path = Path(path)
    return path.with_suffix(".json") if path.suffix == ".gguf" else path.parent / (path.name + ".json")


def ensure(
    spec: TinySpec | str, root: Path | None = None, log: TextIO | None = sys.stderr, fmt: str = "gguf"
) -> Path:
    """The cached model for `spec` (a TinySpec or preset name) in format `fmt` ("gguf": one file for
    llama.cpp; "hf": a model directory for vLLM and SGLang), built on first use."""
    spec = preset(spec) if isinstance(spec, str) else spec
    texts = corpus()
    path = model_path(spec, root, texts, fmt)
    built = path.is_file() if fmt == "gguf" else path.is_dir()
    if built:
        return path
    if log is not None:
        print(f"labkit: building tiny model {spec.name} ({fmt}) -> {path}", file=log, flush=True)
    t0 = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=path.parent))  # own folder: concurrent builds agree
    try:
        facts = (build if fmt == "gguf" else build_hf)(spec, work / path.name, texts)
        facts["build_seconds"] = round(time.monotonic() - t0, 3)
        (work / "facts.json").write_text(json.dumps(facts, indent=2, sort_keys=True))
        # Sidecar first, then the model: a model in the cache always has its facts beside it.
        os.replace(work / "facts.json", sidecar(path))
        try:
            os.replace(work / path.name, path)  # a file replaces; a directory only moves into a free name
        except OSError:
            if not path.is_dir():
                raise  # else another builder finished first with the same bytes: keep theirs, drop ours
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
    """The sidecar facts of a cached model (GGUF file or HF directory), if present."""
    side = sidecar(path)
    return json.loads(side.read_text()) if side.is_file() else None


def model_format(plan: LanePlan) -> str | None:
    """The format a plan's engine loads (engine facts): "hf" for vLLM and SGLang, "gguf" for llama.cpp, None
    for an engine that loads no weights (the simulator)."""
    return engine_facts(plan.engine.kind).model_format


def materialize(
    plan: LanePlan, root: Path | None = None, log: TextIO | None = sys.stderr, build: bool = True
) -> LanePlan:
    """The plan with model.path set to the built tiny model when model.repo names one; else unchanged.

    labkit.lab and the CLI call this before launching a lane, so the recipe needs no machine-specific path.
    The format follows the engine (`model_format`): an HF directory for vLLM and SGLang, a GGUF for llama.cpp.
    `build=False` only computes where the model would be (for showing commands); without the packages
    that format needs the plan is then returned unchanged.
    """
    if not plan.wants_built_model:  # the rule serve refuses unbuilt models by (labkit.recipe)
        return plan
    if not plan.cluster.is_local:
        raise ModelBuildError(
            f"{plan.file}: model.repo {plan.model.repo} is built on this machine only; use "
            'cluster.nodes = ["localhost"] or give model.path'
        )
    fmt = model_format(plan)
    assert fmt is not None  # wants_built_model holds only for an engine that loads weights
    if build:
        path = ensure(plan.model.repo, root, log, fmt)
    else:
        try:
            path = model_path(preset(plan.model.repo), root, fmt=fmt)
        except ModelBuildError:
            return plan
    return dataclasses.replace(plan, model=dataclasses.replace(plan.model, path=str(path)))
