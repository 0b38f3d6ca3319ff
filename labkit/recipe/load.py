"""Recipes: `recipes/<name>/recipe.toml` resolved, with named variants applied, into one immutable LanePlan.

A recipe is a declarative lane: model, engine, cluster, staging, measurement plan and named variants
grouped by axis (`spec = dspark`, `staging = local-view`, ...). Resolution is pure: it reads TOML and
returns dataclasses; nothing here touches a node.

Engine args are a TOML table keyed by flag, so variants can add, replace or remove single flags:
    "--kv-cache-dtype" = "fp8"            -> --kv-cache-dtype fp8
    "--enforce-eager" = true              -> --enforce-eager        (false: flag omitted)
    "--speculative-config" = {method = "dspark", num_speculative_tokens = 5}
                                          -> --speculative-config '{"method":"dspark","num_speculative_tokens":5}'
    "--cuda-graph-sizes" = [1, 2, 4]      -> --cuda-graph-sizes 1 2 4
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import RecipeError
from labkit.recipe import schema as s

ENGINE_KINDS = ("vllm", "sglang", "llamacpp", "sim")
RUNTIMES = ("docker", "process")
STAGING_KINDS = ("local-view",)
VIEW_MOUNT = "/root/.cache/hf-view"
RECIPE_FILE = "recipe.toml"


def repo_root() -> Path:
    """The checkout labkit runs from (recipes/, results/, notebooks/ live here)."""
    return Path(__file__).resolve().parents[2]


def recipes_dir() -> Path:
    """Where recipes are found: $LABKIT_RECIPES, else the checkout's recipes/."""
    env = os.environ.get("LABKIT_RECIPES")
    return Path(env) if env else repo_root() / "recipes"


# --------------------------------------------------------------------------------------------------
# Schema


def _arg_value(value: Any, path: str) -> Any:
    if isinstance(value, str | bool | int | float | dict):
        return value
    if isinstance(value, list) and all(isinstance(v, str | int | float) and not isinstance(v, bool) for v in value):
        return value
    raise s.Invalid(path, "expected a string, number, boolean, table (sent as JSON) or array of scalars")


def _args(value: Any, path: str) -> dict:
    out = s.mapping(_arg_value)(value, path)
    for flag in out:
        if not flag.startswith("-") or any(c.isspace() for c in flag):
            raise s.Invalid(s.join(path, flag), "engine arg keys are flags like \"--max-model-len\"")
    return out


def _env(value: Any, path: str) -> dict:
    out = s.mapping(lambda v, p: str(v) if isinstance(v, int | float) and not isinstance(v, bool) else s.string(False)(v, p))(value, path)
    for name in out:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise s.Invalid(s.join(path, name), "not a valid environment variable name")
    return out


def _fields(partial: bool) -> dict[str, s.Field]:
    """The recipe schema; `partial` for variant overlays (no required keys, no defaults)."""
    F = s.Field
    T = lambda fields: s.table(fields, partial=partial)  # noqa: E731
    parallel = {k: F(s.integer(1), default=1) for k in ("tp", "pp", "dp", "ep")}
    engine = {
        "kind": F(s.choice(*ENGINE_KINDS), required=True),
        "image": F(s.string()),
        "runtime": F(s.choice(*RUNTIMES)),
        "port": F(s.integer(1, 65535), default=8000),
        "version": F(s.string()),
        "multinode": F(s.choice("native", "ray"), default="native"),
        "parallel": F(T(parallel), default=dict),
        "args": F(_args, default=dict),
        "env": F(_env, default=dict),
        "boot_timeout": F(s.number(1.0), default=1800.0),
    }
    if partial:
        engine["remove_args"] = F(s.array(s.string(), unique=True))
    staging = s.table({
        "kind": F(s.choice(*STAGING_KINDS), required=True),
        "repo": F(s.string(), required=True),
        "revision": F(s.string()),
        "dst": F(s.absolute_path, required=True),
        "local": F(s.array(s.file_name, nonempty=True, unique=True), required=True),
        "min_free": F(s.size, default=0),
        "mount": F(s.absolute_path, default=VIEW_MOUNT),
    })
    decode = {
        "concurrency": F(s.array(s.integer(1, 64), nonempty=True, unique=True), default=lambda: [1, 2]),
        "turns": F(s.integer(1), default=5),
        "output_tokens": F(s.integer(2), default=256),
        "warmup": F(s.integer(0), default=1),
    }
    prefill = {
        "prompt_tokens": F(s.array(s.integer(16), unique=True), default=lambda: [4096, 12600]),
        "repeats": F(s.integer(1), default=3),
    }
    return {
        "lane": F(T({
            "label": F(s.string()),
            "description": F(s.string(False), default=""),
            "aliases": F(s.array(s.string(), unique=True), default=list),
            "simulated": F(s.boolean, default=False),
            "defaults": F(s.mapping(s.string()), default=dict),
        }), default=dict),
        "model": F(T({
            "repo": F(s.string(), required=True),
            "revision": F(s.string(), default="main"),
            "path": F(s.absolute_path),
            "served_name": F(s.string()),
        }), required=True),
        "engine": F(T(engine), required=True),
        "cluster": F(T({
            "nodes": F(s.array(s.string(), nonempty=True, unique=True), default=lambda: ["localhost"]),
            "user": F(s.string()),
            "ssh_port": F(s.integer(1, 65535), default=22),
            "shared_cache": F(s.absolute_path),
            "head_address": F(s.string()),
            "connect_timeout": F(s.number(0.1), default=10.0),
        }), default=dict),
        "staging": F(s.array(staging), default=list),
        "measure": F(T({
            "api": F(s.choice("chat", "completions"), default="chat"),
            "runs": F(s.integer(1), default=1),
            "decode": F(T(decode), default=dict),
            "prefill": F(T(prefill), default=dict),
            "timeout": F(s.number(1.0), default=600.0),
        }), default=dict),
    }


def _overlay_fields() -> dict[str, s.Field]:
    fields = {k: v for k, v in _fields(partial=True).items() if k != "lane"}
    fields["label"] = s.Field(s.string())
    fields["description"] = s.Field(s.string(False))
    return fields


def _variants(value: Any, path: str) -> dict:
    axes = s.mapping(s.mapping(s.table(_overlay_fields(), partial=True)))(value, path)
    for axis, names in axes.items():
        if not names:
            raise s.Invalid(s.join(path, axis), "an axis needs at least one variant")
    return axes


def _top_fields() -> dict[str, s.Field]:
    fields = _fields(partial=False)
    fields["variants"] = s.Field(_variants, default=dict)
    return fields


# --------------------------------------------------------------------------------------------------
# The resolved plan


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
    head_address: str | None
    connect_timeout: float

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
    def variant_id(self) -> str:
        """Folder-safe variant name, e.g. 'spec-dspark_staging-local-view' ('default' with no axes)."""
        return "_".join(f"{axis}-{name}" for axis, name in self.variants) or "default"

    @property
    def lane_id(self) -> str:
        """Deterministic id naming containers and pid files, stable across invocations."""
        digest = hashlib.sha256(f"{self.recipe}|{self.variant_id}".encode()).hexdigest()[:8]
        return f"labkit-{_slug(self.recipe)[:40]}-{digest}"

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

    def mounts(self) -> list[tuple[str, str]]:
        """(host path, container path) bind mounts for the docker runtime."""
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
            "engine_argv": self.engine.argv(),
            "resolved": self.resolved,
        }


def _slug(text: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", text).strip("-") or "lane"


# --------------------------------------------------------------------------------------------------
# Loading and resolving


@dataclass(frozen=True)
class Recipe:
    """A validated recipe file before a variant choice; `resolve` turns it into a LanePlan."""

    name: str
    file: Path
    data: dict  # validated, defaults filled

    @property
    def aliases(self) -> list[str]:
        return list(self.data["lane"]["aliases"])

    @property
    def axes(self) -> dict[str, list[str]]:
        return {axis: list(names) for axis, names in self.data["variants"].items()}

    def default_variant(self, axis: str) -> str:
        return self.data["lane"]["defaults"].get(axis) or next(iter(self.data["variants"][axis]))

    @property
    def note(self) -> Path:
        return self.file.parent / "NOTE.md"

    def resolve(self, choices: dict[str, str | None] | None = None) -> LanePlan:
        return resolve(self, choices or {})


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate one recipe file (or folder). Raises RecipeError naming the file and key."""
    path = Path(path)
    file = path / RECIPE_FILE if path.is_dir() else path
    shown = _shown(file)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(shown, "", "file not found")
    except UnicodeDecodeError as e:
        raise RecipeError(shown, "", f"not UTF-8 text ({e.reason} at byte {e.start})")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(shown, "", f"TOML syntax error: {e}")
    try:
        data = s.table(_top_fields())(raw, "")
        _check_defaults(data)
        defaults = {a: _default(data, a) for a in data["variants"]}
    except s.Invalid as e:
        raise RecipeError(shown, e.key, e.message)
    # Every variant must resolve on its own: a broken overlay fails `labkit check`, not a later run.
    combos = [defaults] + [{**defaults, axis: name} for axis, names in data["variants"].items()
                           for name in names if name != defaults[axis]]
    for combo in combos:
        try:
            _check_whole(_merge(data, combo))
        except s.Invalid as e:
            which = ", ".join(f"{a}={n}" for a, n in combo.items())
            raise RecipeError(shown, e.key, e.message + (f" (with variants {which})" if which else ""))
    return Recipe(name=file.parent.name, file=file, data=data)


def _shown(file: Path) -> str:
    try:
        return str(file.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(file)


def _default(data: dict, axis: str) -> str:
    return data["lane"]["defaults"].get(axis) or next(iter(data["variants"][axis]))


def _check_defaults(data: dict) -> None:
    for axis, name in data["lane"]["defaults"].items():
        path = f"lane.defaults.{axis}"
        if axis not in data["variants"]:
            raise s.Invalid(path, f"no variant axis '{axis}'{s.suggest(axis, data['variants'])}")
        if name not in data["variants"][axis]:
            names = data["variants"][axis]
            raise s.Invalid(path, f"no variant '{name}' on axis '{axis}'{s.suggest(name, names)}; have {', '.join(names)}")


def _merge(data: dict, choices: dict[str, str]) -> dict:
    """Apply the chosen overlays, in axis order, to a deep copy of the base recipe."""
    merged = {k: copy.deepcopy(v) for k, v in data.items() if k != "variants"}
    for axis, name in choices.items():
        overlay = data["variants"][axis][name]
        where = f"variants.{axis}.{name}"
        for key, value in overlay.items():
            if key in ("label", "description"):
                merged["lane"][key] = value
            elif key == "staging":
                merged["staging"] = copy.deepcopy(value)
            elif key == "engine":
                _merge_engine(merged["engine"], value, f"{where}.engine")
            else:
                _deep_update(merged[key], value)
    # Fill defaults of partially given sub-tables (an overlay may have added keys only).
    return s.table(_fields(partial=False))(merged, "")


def _merge_engine(engine: dict, overlay: dict, where: str) -> None:
    for key, value in overlay.items():
        if key == "args":
            engine["args"].update(copy.deepcopy(value))
        elif key == "remove_args":
            for i, flag in enumerate(value):
                if flag not in engine["args"]:
                    raise s.Invalid(f"{where}.remove_args[{i}]",
                                    f"flag {flag} is not in engine.args{s.suggest(flag, engine['args'])}")
                del engine["args"][flag]
        elif key in ("env", "parallel"):
            engine[key].update(copy.deepcopy(value))
        else:
            engine[key] = copy.deepcopy(value)


def _deep_update(base: dict, overlay: dict) -> None:
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = copy.deepcopy(value)


def _check_whole(merged: dict) -> None:
    """Cross-key rules that hold only for a complete lane (after overlays)."""
    engine, cluster = merged["engine"], merged["cluster"]
    runtime = engine.get("runtime") or ("process" if engine["kind"] in ("sim", "llamacpp") else "docker")
    if runtime == "docker" and not engine.get("image"):
        raise s.Invalid("engine.image", "required when engine.runtime is docker")
    par = engine["parallel"]
    world = par["tp"] * par["pp"]
    nodes = len(cluster["nodes"])
    if engine["kind"] in ("vllm", "sglang") and nodes > 1 and world % nodes:
        raise s.Invalid("engine.parallel", f"tp*pp = {world} is not divisible by the {nodes} nodes")
    cache = cluster.get("shared_cache")
    for i, entry in enumerate(merged["staging"]):
        if cache and (entry["dst"] == cache or entry["dst"].startswith(cache.rstrip("/") + "/")):
            raise s.Invalid(f"staging[{i}].dst", f"{entry['dst']} is inside the shared cache {cache}; "
                            "the view must live on node-local disk")
        if not cache:
            raise s.Invalid("cluster.shared_cache", "required when the recipe has [[staging]] entries")


def resolve(recipe: Recipe, choices: dict[str, str | None]) -> LanePlan:
    """The LanePlan for a variant choice ({axis: name}); unchosen axes take their default."""
    data = recipe.data
    shown = _shown(recipe.file)
    picked: dict[str, str] = {}
    for axis, name in choices.items():
        if name is None:
            continue
        if axis not in data["variants"]:
            have = ", ".join(data["variants"]) or "none"
            raise RecipeError(shown, "variants", f"recipe {recipe.name} has no variant axis '{axis}'"
                              f"{s.suggest(axis, data['variants'])}; axes: {have}")
        if name not in data["variants"][axis]:
            names = data["variants"][axis]
            raise RecipeError(shown, f"variants.{axis}", f"no variant '{name}'{s.suggest(name, names)}; "
                              f"{axis} variants: {', '.join(names)}")
        picked[axis] = name
    ordered = {axis: picked.get(axis) or _default(data, axis) for axis in data["variants"]}
    try:
        merged = _merge(data, ordered)
        _check_whole(merged)
    except s.Invalid as e:
        raise RecipeError(shown, e.key, e.message)
    return _build(recipe.name, shown, ordered, merged)


def _render_args(args: dict) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out = []
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


def _build(name: str, shown: str, choices: dict[str, str], merged: dict) -> LanePlan:
    e, c, m = merged["engine"], merged["cluster"], merged["measure"]
    runtime = e["runtime"] or ("process" if e["kind"] in ("sim", "llamacpp") else "docker")
    model = ModelSpec(merged["model"]["repo"], merged["model"]["revision"], merged["model"]["path"],
                      merged["model"]["served_name"])
    engine = EngineSpec(
        kind=e["kind"], image=e["image"], runtime=runtime, port=e["port"], version=e["version"],
        multinode=e["multinode"], parallel=Parallel(**e["parallel"]), args=_render_args(e["args"]),
        env=tuple(e["env"].items()), boot_timeout=e["boot_timeout"],
    )
    cluster = ClusterSpec(tuple(c["nodes"]), c["user"], c["ssh_port"], c["shared_cache"], c["head_address"],
                          c["connect_timeout"])
    staging = tuple(
        StagingSpec(st["kind"], st["repo"], st["revision"] or model.revision, st["dst"], tuple(st["local"]),
                    st["min_free"], st["mount"])
        for st in merged["staging"]
    )
    d, p = m["decode"], m["prefill"]
    measure = MeasurePlan(m["api"], m["runs"], DecodePlan(tuple(d["concurrency"]), d["turns"], d["output_tokens"],
                                                          d["warmup"]),
                          PrefillPlan(tuple(p["prompt_tokens"]), p["repeats"]), m["timeout"])
    blob = json.dumps({"recipe": name, "variants": choices, "lane": merged}, sort_keys=True, default=str)
    lane = merged["lane"]
    return LanePlan(
        recipe=name, file=shown, variants=tuple(choices.items()),
        label=lane["label"] or name, description=lane["description"], simulated=lane["simulated"],
        model=model, engine=engine, cluster=cluster, staging=staging, measure=measure,
        recipe_hash=hashlib.sha256(blob.encode()).hexdigest()[:12], resolved=json.loads(blob)["lane"],
    )


# --------------------------------------------------------------------------------------------------
# Finding recipes


def list_recipes(root: Path | None = None) -> list[Path]:
    root = root or recipes_dir()
    if not root.is_dir():
        return []
    return sorted(p.parent for p in root.glob(f"*/{RECIPE_FILE}"))


def find_recipe(name: str, root: Path | None = None) -> Path:
    """A recipe folder by folder name, alias, unique prefix, or a path to a folder/recipe.toml."""
    root = root or recipes_dir()
    given = Path(name).expanduser()
    if given.is_file() and given.suffix == ".toml":
        return given.parent
    if (given / RECIPE_FILE).is_file() and (os.sep in name or name.startswith(".")):
        return given
    folders = list_recipes(root)
    by_name = {p.name: p for p in folders}
    if name in by_name:
        return by_name[name]
    aliases: dict[str, Path] = {}
    for folder in folders:
        try:
            raw = tomllib.loads((folder / RECIPE_FILE).read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
            continue
        lane = raw.get("lane", {})
        for alias in lane.get("aliases", []) if isinstance(lane, dict) else []:
            if isinstance(alias, str):
                aliases[alias] = folder
    if name in aliases:
        return aliases[name]
    prefixed = [p for p in folders if p.name.startswith(name)]
    if len(prefixed) == 1:
        return prefixed[0]
    known = sorted(by_name) + sorted(aliases)
    if len(prefixed) > 1:
        raise RecipeError(str(root), "", f"recipe '{name}' is ambiguous: {', '.join(p.name for p in prefixed)}")
    hint = s.suggest(name, known)
    raise RecipeError(str(root), "", f"no recipe '{name}'{hint}; known: {', '.join(known) or 'none'}")


def load_plan(name: str, root: Path | None = None, **choices: str | None) -> LanePlan:
    """Find, load and resolve in one call: `load_plan("dsv41", spec="dspark")`."""
    return load_recipe(find_recipe(name, root)).resolve(choices)


def shell_command(argv: list[str]) -> str:
    """One argv as a copy-pasteable shell line (every argument quoted as needed)."""
    return shlex.join(argv)
