"""Human-readable text for a resolved LanePlan (`labkit show`, the notebook's dry run)."""

from __future__ import annotations

import re

from labkit.recipe.plan import LanePlan, shell_command
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
        ("model", f"{plan.model.repo} @ {plan.model.revision}"),
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
        (
            "engine",
            f"{e.kind}" + (f" {e.version}" if e.version else "") + f", runtime {e.runtime}, port {e.port}",
        ),
        ("image", e.image or "-"),
        (
            "parallel",
            f"tp={par.tp} pp={par.pp} dp={par.dp} ep={par.ep}"
            + (f", multinode {e.multinode}" if len(c.nodes) > 1 else ""),
        ),
        ("engine args", shell_command(e.argv()) or "-"),
        ("engine env", " ".join(f"{k}={v}" for k, v in e.env) or "-"),
        ("nodes", ", ".join(c.nodes) + (f"  (user {c.user})" if c.user else "")),
        ("shared cache", c.shared_cache or "-"),
    ]
    for host, container in plan.mounts():
        rows.append(("mount", f"{host} -> {container}"))
    for st in plan.staging:
        rows.append(
            (
                "staging",
                f"{st.kind} {st.repo}@{st.revision} -> {st.dst} "
                f"(local: {', '.join(st.local)}; min free {format_size(st.min_free)})",
            )
        )
    d, p = m.decode, m.prefill
    rows += [
        (
            "decode",
            f"c{'/c'.join(map(str, d.concurrency))}, {d.turns} turns x {d.output_tokens} tokens, "
            f"{d.warmup} warmup",
        ),
        ("prefill", f"{', '.join(map(str, p.prompt_tokens))} prompt tokens x {p.repeats}, unique prompts"),
        ("runs", f"{m.runs} ({m.api} API, {m.timeout:g} s request timeout)"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    if commands:
        lines.append("")
        lines.append("commands:")
        for node, command in commands.items():
            lines.append(f"  [{node}] {command}")
    return "\n".join(lines)
