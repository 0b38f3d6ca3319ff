"""Cross-key rules that hold only for a complete lane (after overlays), and the parallelism rule a nodes
override is checked against again (`labkit.recipe.override`).

Parallelism: a multi-node vLLM or SGLang lane needs tp·pp·dp = nodes × `cluster.gpus_per_node` (one on a
GB10 DGX Spark). Expert parallelism does not count: vLLM's EP reuses the TP×DP ranks and SGLang's
`--ep-size` divides `--tp`, which is the total. SGLang's `--enable-dp-attention` runs its DP groups inside
TP, so there dp does not count either. Recipe args that set a size win over `engine.parallel`, as they do
in the engine adapters (docs/engines.md, "Multi-node launch flags"). Which engines the rule holds for and
their flags are rows of the engine facts table (labkit.recipe.enginefacts).
"""

from __future__ import annotations

import ipaddress

import labkit.recipe.schema as s
from labkit.measures import decode_key, measure_key, prefill_key
from labkit.recipe.build import render_args
from labkit.recipe.enginefacts import engine_facts
from labkit.recipe.fields import docker_fields
from labkit.recipe.launch import compile_cache_mounts
from labkit.recipe.measureplan import PER_RUN_MEASURES
from labkit.recipe.workloads import check_workloads, workload_targets


def world_size(kind: str, sizes: dict[str, int], args: dict[str, tuple[str, ...]]) -> tuple[int, str]:
    """(GPUs the lane needs, how that was counted), from engine.parallel and the rendered args."""
    flags = engine_facts(kind).parallel
    counted = {}
    for axis in ("tp", "pp", "dp"):
        counted[axis] = sizes[axis]
        for flag in flags.axis(axis):
            values = args.get(flag)
            if values and values[0].isdigit():
                counted[axis] = int(values[0])
    if any(flag in args for flag in flags.dp_inside_tp):
        del counted["dp"]  # DP attention splits the TP ranks, it does not add GPUs
    names = "*".join(counted)
    world = 1
    for size in counted.values():
        world *= size
    return world, f"{names} = {'*'.join(map(str, counted.values()))} = {world}"


def parallel_problem(kind: str, world: tuple[int, str], nodes: int, gpus_per_node: int) -> str | None:
    """Why this parallelism cannot run on `nodes` nodes (None when it can, or when the rule does not apply:
    one node, or an engine whose nodes do not run one engine's ranks)."""
    if engine_facts(kind).nodes != "ranks" or nodes < 2:
        return None
    size, how = world
    if size == nodes * gpus_per_node:
        return None
    gpus = f"{gpus_per_node} GPU{'s' if gpus_per_node > 1 else ''}"
    return (
        f"{how} ranks, but {nodes} nodes x {gpus} per node (cluster.gpus_per_node) = "
        f"{nodes * gpus_per_node} GPUs; the lane needs one rank per GPU"
    )


def fabric_problem(kind: str, runtime: str, nodes: tuple[str, ...], fabric: bool) -> str | None:
    """Why a docker lane whose nodes run one engine's ranks is at risk without `[cluster.fabric]`, or None (one
    node, a fabric, nodes given as IP addresses, which the engines take verbatim, or an engine without ranks).
    The engines are then handed the management host names as their bind and rendezvous addresses, and a name
    that resolves to 127.0.1.1 on its own node leaves the other ranks waiting until the boot times out
    (docs/engines.md, "Fabric addresses and environment"). A warning, not a refusal: names that DNS or
    /etc/hosts resolve to routable addresses on every node work, and only the nodes can tell."""
    if fabric or runtime != "docker" or len(nodes) < 2 or engine_facts(kind).nodes != "ranks":
        return None
    named = [n for n in nodes if not _is_ip(n)]
    if not named:
        return None
    return (
        f"missing: this docker lane runs one {engine_facts(kind).name} engine across {len(nodes)} nodes, and "
        f"without [cluster.fabric] its engines get the host names {', '.join(named)} as their addresses (a name "
        "that resolves to 127.0.1.1 on its own node leaves the ranks waiting until the boot times out); add "
        '[cluster.fabric] with interface = the netdev the engines talk over ("enp1s0f1np1" on a DGX Spark)'
    )


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def check_whole(merged: dict) -> None:
    """Cross-key rules that hold only for a complete lane (after overlays)."""
    engine, cluster = merged["engine"], merged["cluster"]
    runtime = engine.get("runtime") or engine_facts(engine["kind"]).runtime
    if runtime == "docker" and not engine.get("image"):
        raise s.Invalid("engine.image", "required when engine.runtime is docker")
    if runtime != "docker" and engine["docker"] != s.table(docker_fields())({}, "engine.docker"):
        raise s.Invalid("engine.docker", f"only the docker runtime uses it, and engine.runtime is {runtime}")
    args = dict(render_args(engine["args"]))
    world = world_size(engine["kind"], engine["parallel"], args)
    problem = parallel_problem(engine["kind"], world, len(cluster["nodes"]), cluster["gpus_per_node"])
    if problem:
        raise s.Invalid("engine.parallel", problem)
    _check_request_metrics(engine["kind"], args)
    _check_fabric(cluster)
    if cluster.get("min_free_after_drop") is not None and not engine["drop_caches"]:
        raise s.Invalid(
            "cluster.min_free_after_drop",
            "needs engine.drop_caches = true: it is checked on the memory left after the page-cache drop",
        )
    _check_staging(merged)
    check_target_keys(merged["measure"])
    check_workloads(merged)
    if runtime == "docker":
        _check_mounts(merged)


def _check_request_metrics(kind: str, args: dict[str, tuple[str, ...]]) -> None:
    """The engine's per-request speculative counts need speculation on: vLLM refuses to boot otherwise
    (docs/engines.md, "Per-request metrics in the response"), so the recipe is refused first."""
    flags = engine_facts(kind).request_metrics
    if (
        flags.spec
        and flags.spec_needs
        and flags.spec[0] in flags.asked(args)
        and flags.spec_needs not in args
    ):
        raise s.Invalid(
            f'engine.args."{flags.spec[0]}"',
            f"needs {flags.spec_needs}: {engine_facts(kind).name} refuses per-request speculative-decoding "
            "metrics without speculation (set it in the variant that turns speculation on)",
        )


def check_target_keys(measure: dict) -> None:
    """measure.target_ci needs room for an interval (3 runs) under its cap; the cap needs a target."""
    target, cap, runs = measure.get("target_ci"), measure.get("max_runs"), measure["runs"]
    if target is None:
        for key in ("max_runs", "target_measures"):
            if measure.get(key):
                raise s.Invalid(f"measure.{key}", "only used with measure.target_ci, which is not set")
        return
    if not 0.0 < target < 1.0:
        raise s.Invalid("measure.target_ci", f"a relative half-width such as 0.02 (±2 %), got {target}")
    for i, name in enumerate(measure.get("target_measures") or ()):
        problem = _unknown_measure(name, measure)
        if problem:
            raise s.Invalid(f"measure.target_measures[{i}]", problem)
    if cap is not None and cap < max(runs, 3):
        raise s.Invalid(
            "measure.max_runs",
            f"{cap} is below measure.runs ({runs}) or below 3, the fewest runs an interval is computed from",
        )


def _unknown_measure(name: str, measure: dict) -> str | None:
    """Why a target measure can never be measured by this plan (None when it can)."""
    conc, lengths = measure["decode"]["concurrency"], measure["prefill"]["prompt_tokens"]
    known = set(PER_RUN_MEASURES)
    for k in conc:
        groups = {measure_key(f"decode_c<N>_{x}", concurrency=k) for x in ("agg", "span")}
        known |= {decode_key(1)} if k == 1 else groups
    for n in lengths:
        known |= {prefill_key(n, m) for m in ("", "raw", "ttft")}
    known |= workload_targets(measure)  # content categories, turns, idle lengths, depths (workloads.py)
    if name in known:
        return None
    return f"{name!r} is not a measure this plan produces{s.suggest(name, sorted(known))}"


def _check_fabric(cluster: dict) -> None:
    fabric = cluster.get("fabric")
    for key in ("addresses", "interfaces"):
        for node in (fabric or {}).get(key, {}):
            if node not in cluster["nodes"]:
                raise s.Invalid(
                    f"cluster.fabric.{key}.{node}",
                    f"{node!r} is not one of cluster.nodes{s.suggest(node, cluster['nodes'])}: "
                    f"{', '.join(cluster['nodes'])}",
                )
    seen: dict[str, str] = {}
    for node, address in (fabric or {}).get("addresses", {}).items():
        if address in seen:
            raise s.Invalid(f"cluster.fabric.addresses.{node}", f"{address} is {seen[address]}'s address too")
        seen[address] = node


def _check_staging(merged: dict) -> None:
    cache = merged["cluster"].get("shared_cache")
    for i, entry in enumerate(merged["staging"]):
        if cache and (entry["dst"] == cache or entry["dst"].startswith(cache.rstrip("/") + "/")):
            raise s.Invalid(
                f"staging[{i}].dst",
                f"{entry['dst']} is inside the shared cache {cache}; the view must live on node-local disk",
            )
        if not cache:
            raise s.Invalid("cluster.shared_cache", "required when the recipe has [[staging]] entries")


def _check_mounts(merged: dict) -> None:
    """engine.docker.mounts must not land on a container path the plan already mounts (docker refuses)."""
    engine, model = merged["engine"], merged["model"]
    taken = {}
    if merged["cluster"].get("shared_cache"):
        taken[merged["cluster"]["shared_cache"]] = "the shared cache"
    if model.get("path"):
        taken[model["path"]] = "model.path"
    views = [e for e in merged["staging"] if e["kind"] == "local-view" and e["repo"] == model["repo"]]
    if views:
        taken[views[0]["mount"]] = "the staged view"
    if engine["docker"]["compile_cache"]:
        for _, container in compile_cache_mounts(engine["kind"]):
            taken[container] = "a compile cache (engine.docker.compile_cache)"
    for i, text in enumerate(engine["docker"]["mounts"]):
        container = text.split(":")[1]
        if container in taken:
            raise s.Invalid(
                f"engine.docker.mounts[{i}]",
                f"{container} is already mounted in the container ({taken[container]})",
            )
        taken[container] = f"engine.docker.mounts[{i}]"
