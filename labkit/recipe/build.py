"""How a merged, checked recipe table becomes one `LanePlan`, and the hash that names what it resolved to.

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

from labkit.recipe.enginefacts import engine_facts
from labkit.recipe.launch import docker_options, fabric_spec
from labkit.recipe.measureplan import DecodePlan, MeasurePlan, PrefillPlan
from labkit.recipe.plan import LanePlan
from labkit.recipe.specs import ClusterSpec, EngineSpec, ModelSpec, Parallel
from labkit.recipe.staging import StagingSpec
from labkit.recipe.workloads import WORKLOAD_TABLES, workload_plans


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


# keys (section, key) left out of the resolved table while they hold no value, so a recipe that does not use
# a key added later keeps its hash, its `labkit show` text and its measurement plan in the comparability gate;
# every optional workload's [measure] key is too (unset_left_out)
UNSET_LEFT_OUT = (
    ("model", "loops"),
    ("cluster", "min_free_after_drop"),
)
# keys that describe the lane without changing what runs on it: never part of its hash, set or not (the
# device only names the nominal bandwidth the roofline uses before a probe, docs/roofline.md)
DESCRIPTIVE = (("cluster", "device"),)


def unset_left_out() -> tuple[tuple[str, str], ...]:
    """Every key left out of the resolved table while unset: the registered workloads' (read at each call, so
    a workload registered later counts), then UNSET_LEFT_OUT."""
    return tuple(("measure", key) for key in WORKLOAD_TABLES) + UNSET_LEFT_OUT


# cluster.fabric keys left out of the resolved table while they hold their default (today's switch fabric, one
# interface for all), for the same reason: a fabric recipe written before them keeps its hash
FABRIC_DEFAULTS_LEFT_OUT = {"topology": "switch", "interfaces": {}}


def _blob(name: str, choices: dict[str, str], merged: dict) -> str:
    for section, key in unset_left_out():
        table = merged.get(section)
        if isinstance(table, dict) and key in table and not table[key]:
            merged = {**merged, section: {k: v for k, v in table.items() if k != key}}
    for section, key in DESCRIPTIVE:
        table = merged.get(section)
        if isinstance(table, dict) and key in table:
            merged = {**merged, section: {k: v for k, v in table.items() if k != key}}
    cluster = merged.get("cluster")
    fabric = cluster.get("fabric") if isinstance(cluster, dict) else None
    if (
        isinstance(cluster, dict)
        and isinstance(fabric, dict)
        and any(fabric.get(k) == v for k, v in FABRIC_DEFAULTS_LEFT_OUT.items())
    ):
        fabric = {k: v for k, v in fabric.items() if FABRIC_DEFAULTS_LEFT_OUT.get(k, object()) != v}
        merged = {**merged, "cluster": {**cluster, "fabric": fabric}}
    return json.dumps({"recipe": name, "variants": choices, "lane": merged}, sort_keys=True, default=str)


def recipe_hash(name: str, choices: dict[str, str], merged: dict) -> str:
    """The hash of a resolved lane: recipe name, variant choice and the merged table (`LanePlan.resolved`)."""
    return hashlib.sha256(_blob(name, choices, merged).encode()).hexdigest()[:12]


def build_plan(name: str, shown: str, choices: dict[str, str], merged: dict) -> LanePlan:
    """The LanePlan of a merged, checked recipe table; `shown` is the file as error messages name it."""
    e, c, m = merged["engine"], merged["cluster"], merged["measure"]
    runtime = e["runtime"] or engine_facts(e["kind"]).runtime
    mo = merged["model"]
    model = ModelSpec(mo["repo"], mo["revision"], mo["path"], mo["served_name"], bool(mo.get("loops")))
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
        c["min_free_after_drop"],
        c["device"],
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
        measure=measure_plan(m),
        recipe_hash=recipe_hash(name, choices, merged),
        resolved=json.loads(blob)["lane"],
    )


def measure_plan(m: dict) -> MeasurePlan:
    """The merged [measure] table as a MeasurePlan."""
    d, p = m["decode"], m["prefill"]
    return MeasurePlan(
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
        workloads=workload_plans(m),
    )
