"""The recipe format as schema fields: every table and key a recipe.toml may have, its type and default.

Built from the generic checkers in schema.py; `top_fields` checks a whole file, `recipe_fields(partial=True)`
the overlay a variant applies.
"""

from __future__ import annotations

import re
from typing import Any

import labkit.recipe.names as names
import labkit.recipe.schema as s
from labkit.recipe.enginefacts import ENGINE_KINDS
from labkit.recipe.staging import VIEW_MOUNT
from labkit.recipe.topology import DEFAULT_TOPOLOGY, TOPOLOGIES
from labkit.recipe.workloads import workload_fields

RUNTIMES = ("docker", "process")
STAGING_KINDS = ("local-view",)
# `docker run --ulimit` names (docker's list, from setrlimit(2)).
ULIMIT_NAMES = (
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
)


def _arg_value(value: Any, path: str) -> Any:
    if isinstance(value, str | bool | int | float | dict):
        return value
    if isinstance(value, list) and all(
        isinstance(v, str | int | float) and not isinstance(v, bool) for v in value
    ):
        return value
    raise s.Invalid(path, "expected a string, number, boolean, table (sent as JSON) or array of scalars")


def _args(value: Any, path: str) -> dict:
    out = s.mapping(_arg_value)(value, path)
    for flag in out:
        if not flag.startswith("-") or any(c.isspace() for c in flag):
            raise s.Invalid(s.join(path, flag), 'engine arg keys are flags like "--max-model-len"')
    return out


def _env(value: Any, path: str) -> dict:
    out = s.mapping(
        lambda v, p: (
            str(v) if isinstance(v, int | float) and not isinstance(v, bool) else s.string(False)(v, p)
        )
    )(value, path)
    for name in out:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise s.Invalid(s.join(path, name), "not a valid environment variable name")
    return out


def _paths(parts: list[str], path: str, form: str, text: str) -> list[str]:
    try:
        return [s.absolute_path(p, path) for p in parts]
    except s.Invalid as e:
        raise s.Invalid(path, f'expected "{form}" with absolute paths, got {text!r} ({e.message})')


def _device(value: Any, path: str) -> str:
    """A `--device` value, "host[:container][:perms]" (perms from r, w, m)."""
    text = s.string()(value, path)
    parts = text.split(":")
    perms = [parts.pop()] if len(parts) > 1 and re.fullmatch(r"[rwm]{1,3}", parts[-1]) else []
    if len(parts) > 2:
        raise s.Invalid(path, f'expected "host[:container][:perms]", got {text!r}')
    return ":".join(_paths(parts, path, "host[:container][:perms]", text) + perms)


def _capability(value: Any, path: str) -> str:
    text = s.string()(value, path)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,63}", text):
        raise s.Invalid(path, f"expected a capability name like 'IPC_LOCK', got {text!r}")
    return text.upper()


def _ulimit_value(value: Any, path: str) -> str:
    """-1 (unlimited) or a count, or "soft:hard"; soft may not exceed hard."""
    if isinstance(value, int) and not isinstance(value, bool):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        raise s.Invalid(path, 'expected an integer or "soft:hard"')
    limits = text.split(":")
    if len(limits) > 2 or not all(re.fullmatch(r"-1|[0-9]+", x) for x in limits):
        raise s.Invalid(path, f'expected an integer >= -1 or "soft:hard" (-1 for unlimited), got {text!r}')
    soft, hard = int(limits[0]), int(limits[-1])
    if -1 not in (soft, hard) and soft > hard:
        raise s.Invalid(path, f"the soft limit {soft} is above the hard limit {hard}")
    return text


def _ulimits(value: Any, path: str) -> dict:
    out = s.mapping(_ulimit_value)(value, path)
    for name in out:
        if name not in ULIMIT_NAMES:
            raise s.Invalid(
                s.join(path, name),
                f"unknown ulimit{s.suggest(name, ULIMIT_NAMES)}; known: {', '.join(ULIMIT_NAMES)}",
            )
    return out


def _shm_size(value: Any, path: str) -> str:
    """A `--shm-size` value as docker reads it: bytes, or a number with b/k/m/g (binary units: 16g = 16 GiB)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return str(value)
    text = value if isinstance(value, str) else None
    if text is None or not re.fullmatch(r"[0-9]+(?:\.[0-9]+)?(?:[bkmgtp]|[kmgtp]i?b)?", text, re.IGNORECASE):
        raise s.Invalid(path, f"expected a size like '16g' or a number of bytes, got {value!r}")
    return text


def _bind_mount(value: Any, path: str) -> str:
    """An extra bind mount, "host:container[:ro]" (":rw" is the default and dropped)."""
    text = s.string()(value, path)
    parts = text.split(":")
    mode = parts.pop() if len(parts) == 3 and parts[-1] in ("ro", "rw") else "rw"
    if len(parts) != 2:
        raise s.Invalid(path, f'expected "host:container[:ro]", got {text!r}')
    host, container = _paths(parts, path, "host:container[:ro]", text)
    return f"{host}:{container}" + (":ro" if mode == "ro" else "")


def _gpus(value: Any, path: str) -> str:
    """`--gpus` as docker reads it ("all", a count, "device=0,1"), or "none" to leave the option out (a CPU
    lane: docker refuses `--gpus` without NVIDIA's runtime)."""
    text = s.string()(value, path)
    if not re.fullmatch(r"all|none|[1-9][0-9]*|device=[0-9A-Za-z-]+(?:,[0-9A-Za-z-]+)*", text):
        raise s.Invalid(path, f'expected "all", "none", a count or "device=0,1", got {text!r}')
    return text


def docker_fields() -> dict[str, s.Field]:
    """[engine.docker]: extra `docker run` options (the docker runtime only)."""
    F = s.Field
    return {
        "privileged": F(s.boolean),
        "devices": F(s.array(_device, unique=True), default=list),
        "cap_add": F(s.array(_capability, unique=True), default=list),
        "ulimits": F(_ulimits, default=dict),
        "shm_size": F(_shm_size),
        "mounts": F(s.array(_bind_mount, unique=True), default=list),
        "compile_cache": F(s.boolean, default=False),
        "gpus": F(_gpus, default="all"),
    }


def _lane() -> dict[str, s.Field]:
    """[lane]: how the lane is named and listed, and the defaults `--spec` fills in."""
    F = s.Field
    return {
        "label": F(s.string()),
        "description": F(s.string(False), default=""),
        "aliases": F(s.array(s.string(), unique=True), default=list),
        "simulated": F(s.boolean, default=False),
        "defaults": F(s.mapping(s.string()), default=dict),
    }


def _model() -> dict[str, s.Field]:
    """[model]: which weights are served, and under what name."""
    F = s.Field
    return {
        "repo": F(s.string(), required=True),
        "revision": F(s.string(), default="main"),
        "path": F(s.absolute_path),
        "served_name": F(s.string()),
        # the model's greedy output repeats by nature (random weights): looping responses are then reported,
        # not gating (docs/measurement.md, "Output sanity"); no default, so a recipe without it keeps its hash
        "loops": F(s.boolean),
    }


def _engine(partial: bool) -> dict[str, s.Field]:
    """[engine]: the server and its flags; only an overlay may `remove_args` inherited from the base."""
    F = s.Field
    parallel = {k: F(s.integer(1), default=1) for k in ("tp", "pp", "dp", "ep")}
    engine = {
        "kind": F(s.choice(*ENGINE_KINDS), required=True),
        "image": F(names.image_reference),
        "runtime": F(s.choice(*RUNTIMES)),
        "port": F(s.integer(1, 65535), default=8000),
        "version": F(s.string()),
        "multinode": F(s.choice("native", "ray"), default="native"),
        "parallel": F(s.table(parallel, partial=partial), default=dict),
        "args": F(_args, default=dict),
        "env": F(_env, default=dict),
        "boot_timeout": F(s.number(1.0), default=1800.0),
        "drop_caches": F(s.boolean, default=False),  # drop the page cache on every node before boot
        "docker": F(s.table(docker_fields(), partial=partial), default=dict),
    }
    if partial:
        engine["remove_args"] = F(s.array(s.string(), unique=True))
    return engine


def _cluster(partial: bool) -> dict[str, s.Field]:
    """[cluster]: the nodes and how to reach them; the names in `nodes` are the SSH and client addresses,
    `head_address` overrides only the client/readiness address, and [cluster.fabric] is what the engines'
    own traffic (rendezvous included) uses."""
    F = s.Field
    fabric = {
        "interface": F(names.interface_name, required=True),
        "hcas": F(s.array(names.hca_name, unique=True), default=list),
        "addresses": F(s.mapping(names.ip_address), default=dict),
        # how the nodes are cabled: one subnet for all ("switch") or a switchless ring (labkit.recipe.topology)
        "topology": F(s.choice(*TOPOLOGIES), default=DEFAULT_TOPOLOGY),
        "interfaces": F(s.mapping(names.interface_name), default=dict),  # {node: netdev} where ports differ
    }
    return {
        "nodes": F(s.array(names.node_name, nonempty=True, unique=True), default=lambda: ["localhost"]),
        "user": F(names.user_name),
        "ssh_port": F(s.integer(1, 65535), default=22),
        "shared_cache": F(s.absolute_path),
        "head_address": F(names.node_name),
        "connect_timeout": F(s.number(0.1), default=10.0),
        "gpus_per_node": F(s.integer(1), default=1),
        "min_free_memory": F(s.size),  # MemAvailable every node needs before boot ("100G"); none by default
        # MemFree every node needs after the page-cache drop (engine.drop_caches): below it the boot is refused
        # (docs/engines.md, "Memory after the page-cache drop"); none by default
        "min_free_after_drop": F(s.size),
        # the nodes' GPU model, whose nominal memory bandwidth the roofline uses until a probe measured one
        # (docs/roofline.md, "Bandwidth"); none by default
        "device": F(s.string()),
        "fabric": F(s.table(fabric, partial=partial)),
    }


def _staging() -> dict[str, s.Field]:
    """One [[staging]] entry; always checked whole, since an overlay replaces the array rather than merging it."""
    F = s.Field
    return {
        "kind": F(s.choice(*STAGING_KINDS), required=True),
        "repo": F(s.string(), required=True),
        "revision": F(s.string()),
        "dst": F(s.absolute_path, required=True),
        "local": F(s.array(s.file_name, nonempty=True, unique=True), required=True),
        "min_free": F(s.size, default=0),
        "mount": F(s.absolute_path, default=VIEW_MOUNT),
        # how staging checks the copies: sampled blocks, or deep (whole-file SHA-256 vs the blob names)
        "verify": F(s.choice("sampled", "deep"), default="sampled"),
        # read each hot shard from the NAS once and pass it node to node (docs/fanout.md); absent: on when
        # the lane has more than one node
        "fanout": F(s.boolean),
    }


def prefill_fields() -> dict[str, s.Field]:
    """[measure.prefill]: the prompt lengths sent alone, each `repeats` times (empty: no prefill window)."""
    return {
        "prompt_tokens": s.Field(s.array(s.integer(16), unique=True), default=lambda: [4096, 12600]),
        "repeats": s.Field(s.integer(1), default=3),
    }


def _measure(partial: bool) -> dict[str, s.Field]:
    """[measure] with its [measure.decode] and [measure.prefill] sweeps, and the optional workloads' keys
    (labkit/recipe/workloads.py; each absent: that workload is not run)."""
    F = s.Field
    decode = {
        "concurrency": F(s.array(s.integer(1, 64), nonempty=True, unique=True), default=lambda: [1, 2]),
        "turns": F(s.integer(1), default=5),
        "output_tokens": F(s.integer(2), default=256),
        "warmup": F(s.integer(0), default=1),
    }
    prefill = prefill_fields()
    return {
        "api": F(s.choice("chat", "completions"), default="chat"),
        "runs": F(s.integer(1), default=1),
        "target_ci": F(s.number(0.0)),  # stop repeating once every target measure's 95 % CI is ±this
        "max_runs": F(s.integer(1)),  # cap on repetitions under target_ci (default TARGET_MAX_RUNS)
        "target_measures": F(s.array(s.string(), unique=True)),  # default: the plan's headline measures
        "telemetry_period": F(s.number(0.0), default=1.0),  # s between node samples; 0: no node telemetry
        "clock_drop": F(s.number(0.0), default=0.10),  # SM clock this far below the node baseline: low-clock
        "seed": F(s.integer(0)),  # shared prompt texts: run i draws them from "<seed>/<i>" (docs/compare.md)
        # here, between seed and decode, so the known keys an unknown one is told of read as they always did
        **workload_fields(partial),
        "decode": F(s.table(decode, partial=partial), default=dict),
        "prefill": F(s.table(prefill, partial=partial), default=dict),
        "timeout": F(s.number(1.0), default=600.0),
    }


def recipe_fields(partial: bool) -> dict[str, s.Field]:
    """The recipe schema, one entry per top-level table; `partial` for variant overlays (no required keys,
    no defaults)."""
    F = s.Field
    T = lambda fields: s.table(fields, partial=partial)  # noqa: E731
    return {
        "lane": F(T(_lane()), default=dict),
        "model": F(T(_model()), required=True),
        "engine": F(T(_engine(partial)), required=True),
        "cluster": F(T(_cluster(partial)), default=dict),
        "staging": F(s.array(s.table(_staging())), default=list),
        "measure": F(T(_measure(partial)), default=dict),
    }


def overlay_fields() -> dict[str, s.Field]:
    """A variant overlay's keys (also a sweep point's): the recipe's tables, partial, plus the lane's label
    and description."""
    fields = {k: v for k, v in recipe_fields(partial=True).items() if k != "lane"}
    fields["label"] = s.Field(s.string())
    fields["description"] = s.Field(s.string(False))
    return fields


def _variants(value: Any, path: str) -> dict:
    axes = s.mapping(s.mapping(s.table(overlay_fields(), partial=True)))(value, path)
    for axis, variants in axes.items():
        if not variants:
            raise s.Invalid(s.join(path, axis), "an axis needs at least one variant")
    return axes


def top_fields() -> dict[str, s.Field]:
    fields = recipe_fields(partial=False)
    fields["variants"] = s.Field(_variants, default=dict)
    return fields
