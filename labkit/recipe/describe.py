"""Human-readable text for a resolved LanePlan (`labkit show`, the notebook's dry run)."""

from __future__ import annotations

import re

from labkit.recipe.enginefacts import engine_facts
from labkit.recipe.measureplan import MeasurePlan
from labkit.recipe.plan import LanePlan
from labkit.recipe.rules import fabric_problem
from labkit.recipe.specs import shell_command
from labkit.recipe.topology import mesh_env
from labkit.recipe.workloads import workload_rows
from labkit.units import format_size


def describe_plan(plan: LanePlan, commands: dict[str, str] | None = None) -> str:
    """The plan as aligned `key: value` lines; `commands` maps node -> the exact command it would run."""
    e, c, m = plan.engine, plan.cluster, plan.measure
    variants = ", ".join(f"{a}={n}" for a, n in plan.variants) or "(none)"
    par = e.parallel
    rows = [
        ("recipe", f"{plan.recipe}  ({plan.file})"),
        ("variants", variants),
        ("label", plan.label + ("  [SIMULATED]" if plan.simulated else "")),
        ("lane id", plan.lane_id),
        ("recipe hash", plan.recipe_hash),
        ("model", f"{plan.model.repo} @ {plan.model.revision}" + _loops(plan)),
        (
            "model path",
            plan.model_path
            + (
                f"  ('{plan.model.revision}' is pinned to its commit via refs/ at boot)"
                if plan.model_path == plan.snapshot_path
                and not re.fullmatch(r"[0-9a-f]{40}", plan.model.revision)
                else ""
            ),
        ),
        ("engine", f"{e.kind}{f' {e.version}' if e.version else ''}, runtime {e.runtime}, port {e.port}"),
        ("image", e.image or "-"),
        (
            "parallel",
            f"tp={par.tp} pp={par.pp} dp={par.dp} ep={par.ep}"
            + (f", multinode {e.multinode}" if len(c.nodes) > 1 else ""),
        ),
        ("engine args", shell_command(e.argv()) or "-"),
        ("server truth", server_truth(plan)),
        ("engine env", " ".join(f"{k}={v}" for k, v in e.env) or "-"),
        ("nodes", ", ".join(c.nodes) + (f"  (user {c.user})" if c.user else "")),
        ("gpus per node", str(c.gpus_per_node)),
        (
            "client",
            plan.client_url
            + ("  (cluster.head_address)" if c.head_address else "  (the head's management name)"),
        ),
        *fabric_rows(plan),
        ("shared cache", c.shared_cache or "-"),
        *docker_rows(plan),
        *preboot_rows(plan),
        *mount_rows(plan),
    ]
    for st in plan.staging:
        rows.append(
            (
                "staging",
                f"{st.kind} {st.repo}@{st.revision} -> {st.dst} "
                f"(local: {', '.join(st.local)}; min free {format_size(st.min_free)})",
            )
        )
    rows += measure_rows(m)
    width = max(len(k) for k, _ in rows)
    lines = [f"WARNING: {w}" for w in lane_warnings(plan)] + [f"{k:<{width}}  {v}" for k, v in rows]
    if commands:
        lines.append("")
        lines.append("commands:")
        for node, command in commands.items():
            lines.append(f"  [{node}] {command}")
    return "\n".join(lines)


def measure_rows(m: MeasurePlan) -> list[tuple[str, str]]:
    """The measurement plan's lines: decode, the optional workloads the plan asks for (their tables' lines, in
    registry order), prefill, runs."""
    d, p = m.decode, m.prefill
    conc = "/c".join(map(str, d.concurrency))
    return [
        ("decode", f"c{conc}, {d.turns} turns x {d.output_tokens} tokens, {d.warmup} warmup"),
        *workload_rows(m),
        ("prefill", f"{', '.join(map(str, p.prompt_tokens))} prompt tokens x {p.repeats}, unique prompts"),
        ("runs", f"{m.runs} ({m.api} API, {m.timeout:g} s request timeout)" + _target(m)),
    ]


def _loops(plan: LanePlan) -> str:
    return (
        "  (its output loops by nature: model.loops, loop check reported, not gating)"
        if plan.model.loops
        else ""
    )


def server_truth(plan: LanePlan) -> str:
    """Whether the lane's responses will carry the engine's own per-request figures (docs/engines.md,
    "Per-request metrics in the response")."""
    facts = engine_facts(plan.engine.kind)
    flags = facts.request_metrics
    if not flags.offered:
        return f"none ({facts.name} returns no per-request figures)"
    asked = flags.asked(dict(plan.engine.args))
    if not asked:
        offer = " / ".join(f[0] for f in (flags.timing, flags.spec) if f)
        return f"not asked for ({facts.name} offers {offer})"
    return "per request: " + ", ".join(asked)


def lane_warnings(plan: LanePlan) -> list[str]:
    """What may keep this lane from booting that only its nodes can settle, each naming the recipe file and key
    (`labkit show` prints them first, `labkit check` below the recipe's line)."""
    e, c = plan.engine, plan.cluster
    missing = fabric_problem(e.kind, e.runtime, c.nodes, c.fabric is not None)
    return [f"{plan.file}: cluster.fabric: {missing}"] if missing else []


def fabric_rows(plan: LanePlan) -> list[tuple[str, str]]:
    """The fabric: interface and HCAs, then each node's address (given, or detected at boot)."""
    fabric = plan.cluster.fabric
    if fabric is None:
        return [("fabric", "- (no [cluster.fabric])")]
    hcas = ", ".join(fabric.hcas) if fabric.hcas else "none (no RDMA)"
    rows = [("fabric", f"interface {fabric.interface}, HCAs {hcas}")]
    for node in plan.cluster.nodes:
        own = fabric.interface_of(node)
        on = f" on {own}" if own != fabric.interface else ""
        rows.append(("fabric address", f"{node}: {fabric.address(node) or 'detected at boot'}{on}"))
    return rows + topology_rows(plan)


def topology_rows(plan: LanePlan) -> list[tuple[str, str]]:
    """A ring's rows: the cabling, and the NCCL mesh set with any value the recipe's env replaces (none for a
    switch, whose output stays as it was before topologies)."""
    fabric = plan.cluster.fabric
    if fabric is None or not fabric.ring:
        return []
    env = dict(plan.engine.env)
    mesh = mesh_env(fabric.topology, len(plan.cluster.nodes))
    shown = " ".join(f"{k}={v}" + (f" (engine.env: {env[k]})" if k in env else "") for k, v in mesh.items())
    return [
        (
            "topology",
            f"ring: rendezvous and sockets over {fabric.interface}"
            + (" (or the node's own, above)" if fabric.interfaces else " (every node's)")
            + ", RDMA over the HCAs listed",
        ),
        ("mesh env", shown or "- (one node)"),
    ]


def mount_rows(plan: LanePlan) -> list[tuple[str, str]]:
    """The container's bind mounts: the model's, engine.docker.mounts, the compile caches."""
    rows = [("mount", f"{host} -> {container}") for host, container in plan.mounts()]
    for bind in plan.engine.docker.mounts:
        rows.append(
            ("mount", f"{bind.host} -> {bind.container}" + ("  (read-only)" if bind.read_only else ""))
        )
    for host, container in plan.compile_cache_mounts:
        rows.append(("mount", f"{host} -> {container}  (compile cache)"))
    return rows


def preboot_rows(plan: LanePlan) -> list[tuple[str, str]]:
    """What the start checks and does on every node before boot beyond the fixed checks (image, fabric, RDMA,
    memory, GPU; docs/engines.md, "Pre-boot checks and labkit doctor")."""
    minimum = plan.cluster.min_free_memory
    parts = [
        "min free memory " + (format_size(minimum) if minimum is not None else "none"),
        "page cache " + ("dropped (engine.drop_caches)" if plan.engine.drop_caches else "kept"),
    ]
    if (after := plan.cluster.min_free_after_drop) is not None:
        parts.append(f"MemFree after the drop at least {format_size(after)}")
    return [("pre-boot", ", ".join(parts))]


def docker_rows(plan: LanePlan) -> list[tuple[str, str]]:
    """The docker options a docker lane adds (nothing for the process runtime)."""
    if plan.engine.runtime != "docker":
        return []
    d = plan.engine.docker
    parts = []
    if d.privileged is not None:
        parts.append("privileged" if d.privileged else "not privileged")
    parts += [f"device {x}" for x in d.devices] + [f"cap-add {x}" for x in d.cap_add]
    parts += [f"ulimit {name}={value}" for name, value in d.ulimits]
    if d.shm_size:
        parts.append(f"shm-size {d.shm_size}")
    parts.append("compile cache " + ("on" if d.compile_cache else "off"))
    parts.append("no --gpus (CPU)" if d.gpus == "none" else f"gpus {d.gpus}")
    rows = [("docker", ", ".join(parts))]
    if plan.rdma_access:
        rows.append(
            (
                "rdma",
                "privileged container"
                if d.privileged
                else "device /dev/infiniband, cap-add IPC_LOCK, ulimit memlock=-1:-1 (the fabric names HCAs)",
            )
        )
    return rows


def _target(m: MeasurePlan) -> str:
    """What measure.target_ci adds to the run count, in the plan's words."""
    if m.target_ci is None:
        return ""
    names = ", ".join(m.ci_measures())
    return f"; more, up to {m.ci_run_cap()}, until the 95 % CI of {names} is within ±{m.target_ci * 100:g} %"
