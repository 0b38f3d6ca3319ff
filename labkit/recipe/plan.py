"""The resolved plan of one lane: the frozen `LanePlan` that composes its parts, and what derives from them.

Everything downstream (staging, serving, measuring, storing) reads it; it is immutable and plain data
(`LanePlan.to_dict`) so a run folder records exactly what ran. Its parts live in specs (model, engine,
cluster), staging (the staging entries) and measureplan (what to measure); build makes one from a recipe table.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from labkit.recipe.enginefacts import engine_facts
from labkit.recipe.launch import compile_cache_env, compile_cache_mounts, compile_caches
from labkit.recipe.measureplan import MeasurePlan
from labkit.recipe.specs import ClusterSpec, EngineSpec, ModelSpec
from labkit.recipe.staging import StagingSpec

BUILT_MODEL_PREFIX = "labkit/"  # model.repo = "labkit/<preset>": a model labkit builds (docs/tinymodel.md)


@dataclass(frozen=True)
class LanePlan:
    """Everything needed to stage, boot and measure one lane; immutable and JSON-serialisable."""

    recipe: str
    file: str
    variants: tuple[tuple[str, str], ...]  # (axis, name) in the recipe's axis order
    label: str
    description: str
    simulated: bool
    model: ModelSpec
    engine: EngineSpec
    cluster: ClusterSpec
    staging: tuple[StagingSpec, ...]
    measure: MeasurePlan
    recipe_hash: str
    resolved: dict = field(compare=False, repr=False, default_factory=dict)

    @property
    def wants_built_model(self) -> bool:
        """model.repo names a model labkit builds and no model.path is given yet (the simulator's
        "labkit/..." names are only the names it serves)."""
        return (
            engine_facts(self.engine.kind).model_format is not None
            and self.model.repo.startswith(BUILT_MODEL_PREFIX)
            and not self.model.path
        )

    @property
    def variant_id(self) -> str:
        """Folder-safe variant name, e.g. 'spec-dspark_staging-local-view' ('default' with no axes)."""
        return "_".join(f"{axis}-{name}" for axis, name in self.variants) or "default"

    @property
    def lane_id(self) -> str:
        """Deterministic id naming containers and pid files, stable across invocations."""
        digest = hashlib.sha256(f"{self.recipe}|{self.variant_id}".encode()).hexdigest()[:8]
        return f"labkit-{slug(self.recipe)[:40]}-{digest}"

    @property
    def client_url(self) -> str:
        """Where a client reaches the lane's engine: its head (cluster.head_address, else the head's management
        name) at the engine's port, as `labkit show` prints it and `labkit bench RECIPE` measures it."""
        host = self.cluster.head_address or self.cluster.head
        return f"http://{f'[{host}]' if ':' in host else host}:{self.engine.port}"

    def variant(self, axis: str) -> str | None:
        return dict(self.variants).get(axis)

    @property
    def view(self) -> StagingSpec | None:
        """The local-view staging entry for the served model, if any."""
        for entry in self.staging:
            if entry.kind == "local-view" and entry.repo == self.model.repo:
                return entry
        return None

    @property
    def snapshot_path(self) -> str | None:
        """The model's snapshot folder in the shared HF cache, as every node sees it."""
        if not self.cluster.shared_cache:
            return None
        return f"{self.cluster.shared_cache}/{self.model.cache_dir_name}/snapshots/{self.model.revision}"

    @property
    def model_path(self) -> str:
        """The path the engine is given: the staged view, an explicit path, the snapshot, or the repo id."""
        view = self.view
        if view is not None:
            return view.mount if self.engine.runtime == "docker" else view.dst
        return self.model.path or self.snapshot_path or self.model.repo

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.model.repo

    @property
    def engine_metrics_asked(self) -> bool:
        """The lane turns on the engine's own per-request figures in its responses (docs/engines.md,
        "Per-request metrics in the response")."""
        return bool(engine_facts(self.engine.kind).request_metrics.asked(dict(self.engine.args)))

    @property
    def rdma_access(self) -> bool:
        """The container needs the RoCE devices: the fabric names HCAs and the runtime is docker. The docker
        runtime then adds /dev/infiniband, IPC_LOCK and an unlimited memlock, unless it runs privileged."""
        fabric = self.cluster.fabric
        return self.engine.runtime == "docker" and fabric is not None and fabric.rdma

    @property
    def compile_cache_mounts(self) -> tuple[tuple[str, str], ...]:
        """(host, container) bind mounts of the persistent compile/JIT caches, when engine.docker.compile_cache
        is on and the runtime is docker. Each host path starts with a literal `$HOME` for the node's shell to
        expand (`$HOME/.cache/labkit/compile/<kind>/<cache>`), so it must not be single-quoted."""
        if self.engine.runtime != "docker" or not self.engine.docker.compile_cache:
            return ()
        return compile_cache_mounts(self.engine.kind)

    @property
    def compile_cache_folders(self) -> tuple[tuple[str, str], ...]:
        """(name, host folder) of each compile cache the engine finds on a node: a docker lane's mounted ones,
        a process lane's engine defaults under the user's home (`$HOME/...`, left to the node's shell); none
        for a docker lane without mounted caches (its containers start with empty ones)."""
        caches = compile_caches(self.engine.kind)
        if self.engine.runtime == "docker":
            return tuple(
                (c.name, host) for c, (host, _) in zip(caches, self.compile_cache_mounts, strict=False)
            )
        return tuple((c.name, c.container.replace("/root/", "$HOME/", 1)) for c in caches)

    @property
    def compile_cache_env(self) -> dict[str, str]:
        """The variables that point the engine at its mounted caches ({} when none are mounted); recipe env wins."""
        return compile_cache_env(self.engine.kind) if self.compile_cache_mounts else {}

    def mounts(self) -> list[tuple[str, str]]:
        """(host path, container path) bind mounts for the docker runtime (the model's; the compile caches and
        engine.docker.mounts are kept apart, in `compile_cache_mounts` and `engine.docker.mounts`)."""
        out: list[tuple[str, str]] = []
        if self.cluster.shared_cache:
            out.append((self.cluster.shared_cache, self.cluster.shared_cache))
        if self.model.path:
            out.append((self.model.path, self.model.path))
        view = self.view
        if view is not None:
            out.append((view.dst, view.mount))
        return out

    def to_dict(self) -> dict:
        """Plain data for run.json and `labkit show --json`."""
        return {
            "recipe": self.recipe,
            "file": self.file,
            "variants": dict(self.variants),
            "variant_id": self.variant_id,
            "lane_id": self.lane_id,
            "label": self.label,
            "simulated": self.simulated,
            "recipe_hash": self.recipe_hash,
            "model_path": self.model_path,
            "mounts": [list(m) for m in self.mounts()],
            "compile_cache_mounts": [list(m) for m in self.compile_cache_mounts],
            "rdma_access": self.rdma_access,
            "engine_argv": self.engine.argv(),
            "resolved": self.resolved,
        }


def slug(text: str) -> str:
    """`text` made safe for container and file names."""
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-") or "lane"
