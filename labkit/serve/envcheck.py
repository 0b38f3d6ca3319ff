"""The environment check before a sweep boots anything: each environment variable a sweep sets that names the
engine (a prefix of ENGINE_ENV_PREFIXES) searched for in the engine's code in the image on the head, as
`labkit doctor --probe` searches it; a name the code never mentions would give N identical boots, so the sweep
refuses it (docs/sweeps.md, "Checked before the first boot").

Names without an engine prefix (HF_HUB_OFFLINE, NCCL_*, UCX_*) are read by other libraries than the engine's
package, so a search there proves nothing: they are listed as not checked, never refused. Runs only the image
lookup and one `grep -rl` per name in the engine's package folder on the head; nothing is started or pulled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from labkit.serve.checks import engine_probes
from labkit.serve.flagcheck import image_problem
from labkit.serve.state import LaneState
from labkit.serve.verdict import FAIL, OK, SKIP, WARN, Check

# the prefixes of the environment variables an engine (or the lab's kernels inside it) reads itself
ENGINE_ENV_PREFIXES = ("VLLM_", "SGLANG_", "SGL_", "B12X_")


@dataclass(frozen=True)
class EnvLever:
    """An environment variable a sweep sets, and where it comes from ("swept by --over ...", "engine.env")."""

    name: str
    origin: str


def engine_named(name: str) -> bool:
    """Whether the name says it is the engine's own (ENGINE_ENV_PREFIXES)."""
    return name.startswith(ENGINE_ENV_PREFIXES)


def split_levers(levers: Iterable[EnvLever]) -> tuple[list[EnvLever], list[EnvLever]]:
    """(the levers to search the engine's code for, the ones left unchecked), each name once, first origin kept."""
    seen: dict[str, EnvLever] = {}
    for lever in levers:
        seen.setdefault(lever.name, lever)
    checked = [x for x in seen.values() if engine_named(x.name)]
    return checked, [x for x in seen.values() if not engine_named(x.name)]


def where(lane: LaneState) -> str:
    """What the search runs in: the lane's image, or the engine's Python on the head for a process lane."""
    image = lane.plan.engine.image
    return image if lane.plan.engine.runtime == "docker" and image else "the engine's Python on the head"


def check_env(
    lane: LaneState, levers: list[EnvLever], allowed: Mapping[str, str] | None = None
) -> list[Check]:
    """One Check per lever: ok when the engine's code mentions it, FAIL when it never does (unless `allowed`
    gives a reason, then warn with it), not checked (SKIP) when the head cannot search the image."""
    head, allowed = lane.group.head, allowed or {}
    if not levers:
        return []
    why = image_problem(lane, head)
    probes = [] if why else engine_probes(lane, head, [x.name for x in levers])
    broken = next((c for c in probes if "name" not in c.facts), None)  # the package could not be searched
    why = why or (broken.result if broken is not None else "")
    if why:
        return [Check(head.name, "env", SKIP, f"{x.name} ({x.origin}): not checked: {why}") for x in levers]
    found = {c.facts["name"]: c for c in probes}
    out, image = [], where(lane)
    for x in levers:
        probe = found[x.name]
        facts = {"name": x.name, "origin": x.origin, "where": image}
        rc = probe.facts.get("grep_rc")
        if rc == 0:
            found_in = probe.result.removeprefix(f"{x.name}: ")
            out.append(Check(head.name, "env", OK, f"{x.name} ({x.origin}): {found_in}", facts))
        elif rc != 1:  # grep itself failed: nothing is known
            out.append(
                Check(head.name, "env", SKIP, f"{x.name} ({x.origin}): not checked: {probe.result}", facts)
            )
        elif x.name in allowed:
            text = f"{x.name} ({x.origin}) is not in the engine's code in {image}; allowed: {allowed[x.name]}"
            out.append(Check(head.name, "env", WARN, text, facts))
        else:
            text = (
                f"{x.name} ({x.origin}): the engine's code in {where(lane)} never mentions it "
                f"({probe.facts.get('package')}), so every point would boot the same engine; "
                f"--allow-env {x.name} --reason TEXT runs it anyway"
            )
            out.append(Check(head.name, "env", FAIL, text, facts))
    return out
