"""The resolved plan: frozen dataclasses for one lane, and how a merged recipe table becomes one.

Everything downstream (staging, serving, measuring, storing) reads these; they are immutable and plain data
(`LanePlan.to_dict`) so a run folder records exactly what ran.

Engine args are a TOML table keyed by flag, so variants can add, replace or remove single flags:
    "--kv-cache-dtype" = "fp8"            -> --kv-cache-dtype fp8
    "--enforce-eager" = true              -> --enforce-eager        (false: flag omitted)
    "--speculative-config" = {method = "dspark", num_speculative_tokens = 5}
                                          -> --speculative-config '{"method":"dspark","num_speculative_tokens":5}'
    "--cuda-graph-sizes" = [1, 2, 4]      -> --cuda-graph-sizes 1 2 4
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field

from labkit.recipe.enginefacts import engine_facts
from labkit.recipe.launch import DockerOptions, FabricSpec, compile_cache_mounts, docker_options, fabric_spec

VIEW_MOUNT = "/root/.cache/hf-view"
TARGET_MAX_RUNS = 10  # measure.max_runs when target_ci is set without it
BUILT_MODEL_PREFIX = "labkit/"  # model.repo = "labkit/<preset>": a model labkit builds (docs/tinymodel.md)


@dataclass(frozen=True)
class ModelSpec:
    repo: str
    revision: str
    path: str | None  # explicit path on the nodes, overrides the shared-cache snapshot path
    served_name: str | None

    @property
    def cache_dir_name(self) -> str:
        """The HF hub cache folder name: models--org--name."""
        return "models--" + self.repo.replace("/", "--")


@dataclass(frozen=True)
class Parallel:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1


@dataclass(frozen=True)
class EngineSpec:
    kind: str
    image: str | None
    runtime: str
    port: int
    version: str | None
    multinode: str
    parallel: Parallel
    args: tuple[tuple[str, tuple[str, ...]], ...]  # (flag, values); () is a bare flag
    env: tuple[tuple[str, str], ...]
    boot_timeout: float
    docker: DockerOptions = DockerOptions()
    drop_caches: bool = False  # drop every node's page cache before boot (best effort, sudo -n)

    def argv(self) -> list[str]:
        out: list[str] = []
        for flag, values in self.args:
            out.append(flag)
            out.extend(values)
        return out

    def arg(self, flag: str) -> tuple[str, ...] | None:
        """Values of one flag, () for a bare flag, None when absent."""
        return dict(self.args).get(flag)


@dataclass(frozen=True)
class ClusterSpec:
    nodes: tuple[str, ...]
    user: str | None
    ssh_port: int
    shared_cache: str | None
    head_address: (
        str | None
    )  # the client/readiness address only; the rendezvous uses the head's fabric address
    connect_timeout: float
    gpus_per_node: int = 1
    fabric: FabricSpec | None = None
    min_free_memory: int | None = None  # bytes of MemAvailable each node needs before boot; None: no minimum

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def is_local(self) -> bool:
        return self.nodes == ("localhost",)


@dataclass(frozen=True)
class StagingSpec:
    kind: str
    repo: str
    revision: str
    dst: str
    local: tuple[str, ...]
    min_free: int
    mount: str
    verify: str = "sampled"  # sampled | deep: how staging checks the copies (docs/staging.md)
    fanout: bool | None = None  # None: on when the lane has more than one node (docs/fanout.md)


@dataclass(frozen=True)
class DecodePlan:
    concurrency: tuple[int, ...]
    turns: int
    output_tokens: int
    warmup: int


@dataclass(frozen=True)
class PrefillPlan:
    prompt_tokens: tuple[int, ...]
    repeats: int


@dataclass(frozen=True)
class MeasurePlan:
    api: str
    runs: int
    decode: DecodePlan
    prefill: PrefillPlan
    timeout: float
    target_ci: float | None = None  # relative half-width of the 95 % interval to repeat until
    max_runs: int | None = None  # cap on repetitions when target_ci is set
    target_measures: tuple[str, ...] = ()  # the measures target_ci applies to; () = the headline ones
    seed: int | None = None  # shared prompt seed: repetition i draws its prompt texts from "<seed>/<i>"
    telemetry_period: float = 1.0  # seconds between node telemetry samples; 0 = none (docs/measurement.md)
    clock_drop: float = 0.10  # a window's SM clock this fraction below the node's baseline is flagged

    def headline_measures(self) -> tuple[str, ...]:
        """decode_c1, decode_c<K>_agg and prefill_<P>: the figures a lane is judged by, in plan order."""
        out = [f"decode_c{k}" if k == 1 else f"decode_c{k}_agg" for k in self.decode.concurrency]
        if self.decode.turns < 1:
            out = []
        return tuple(out + [f"prefill_{p}" for p in self.prefill.prompt_tokens])

    def ci_measures(self) -> tuple[str, ...]:
        """The measures `target_ci` is checked on."""
        return self.target_measures or self.headline_measures()

    def ci_run_cap(self) -> int:
        """How many repetitions at most: `runs` without target_ci, else max_runs (default TARGET_MAX_RUNS)."""
        if self.target_ci is None:
            return self.runs
        return self.max_runs if self.max_runs is not None else max(self.runs, TARGET_MAX_RUNS)


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

    def mounts(self) -> list[tuple[str, str]]:
        """(host path, container path) bind mounts for the docker runtime (the model's; the compile caches and
        engine.docker.mounts are kept apart, in `compile_cache_mounts` and `engine.docker.mounts`)."""
        out = []
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


def shell_command(argv: list[str]) -> str:
    """One argv as a copy-pasteable shell line (every argument quoted as needed)."""
    return shlex.join(argv)


def render_args(args: dict) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The engine args table as (flag, values) pairs, rendered as the module docstring shows."""
    out: list[tuple[str, tuple[str, ...]]] = []
    for flag, value in args.items():
        if value is False:
            continue
        if value is True:
            out.append((flag, ()))
        elif isinstance(value, dict):
            out.append((flag, (json.dumps(value, separators=(",", ":")),)))
        elif isinstance(value, list):
            out.append((flag, tuple(str(v) for v in value)))
        else:
            out.append((flag, (str(value),)))
    return tuple(out)


def _blob(name: str, choices: dict[str, str], merged: dict) -> str:
    return json.dumps({"recipe": name, "variants": choices, "lane": merged}, sort_keys=True, default=str)


def recipe_hash(name: str, choices: dict[str, str], merged: dict) -> str:
    """The hash of a resolved lane: recipe name, variant choice and the merged table (`LanePlan.resolved`)."""
    return hashlib.sha256(_blob(name, choices, merged).encode()).hexdigest()[:12]


def build_plan(name: str, shown: str, choices: dict[str, str], merged: dict) -> LanePlan:
    """The LanePlan of a merged, checked recipe table; `shown` is the file as error messages name it."""
    e, c, m = merged["engine"], merged["cluster"], merged["measure"]
    runtime = e["runtime"] or engine_facts(e["kind"]).runtime
    model = ModelSpec(
        merged["model"]["repo"],
        merged["model"]["revision"],
        merged["model"]["path"],
        merged["model"]["served_name"],
    )
    engine = EngineSpec(
        kind=e["kind"],
        image=e["image"],
        runtime=runtime,
        port=e["port"],
        version=e["version"],
        multinode=e["multinode"],
        parallel=Parallel(**e["parallel"]),
        args=render_args(e["args"]),
        env=tuple(e["env"].items()),
        boot_timeout=e["boot_timeout"],
        docker=docker_options(e["docker"]),
        drop_caches=e["drop_caches"],
    )
    cluster = ClusterSpec(
        tuple(c["nodes"]),
        c["user"],
        c["ssh_port"],
        c["shared_cache"],
        c["head_address"],
        c["connect_timeout"],
        c["gpus_per_node"],
        fabric_spec(c["fabric"]),
        c["min_free_memory"],
    )
    staging = tuple(
        StagingSpec(
            st["kind"],
            st["repo"],
            st["revision"] or model.revision,
            st["dst"],
            tuple(st["local"]),
            st["min_free"],
            st["mount"],
            st["verify"],
            st.get("fanout"),
        )
        for st in merged["staging"]
    )
    d, p = m["decode"], m["prefill"]
    measure = MeasurePlan(
        m["api"],
        m["runs"],
        DecodePlan(tuple(d["concurrency"]), d["turns"], d["output_tokens"], d["warmup"]),
        PrefillPlan(tuple(p["prompt_tokens"]), p["repeats"]),
        m["timeout"],
        m["target_ci"],
        m["max_runs"],
        tuple(m["target_measures"] or ()),
        m["seed"],
        m["telemetry_period"],
        m["clock_drop"],
    )
    blob = _blob(name, choices, merged)
    lane = merged["lane"]
    return LanePlan(
        recipe=name,
        file=shown,
        variants=tuple(choices.items()),
        label=lane["label"] or name,
        description=lane["description"],
        simulated=lane["simulated"],
        model=model,
        engine=engine,
        cluster=cluster,
        staging=staging,
        measure=measure,
        recipe_hash=recipe_hash(name, choices, merged),
        resolved=json.loads(blob)["lane"],
    )
