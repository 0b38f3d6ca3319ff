"""What a lane plan becomes on its nodes: each node's launch and exact start command, computed without
contacting them (for `labkit show` too), and the `Endpoint` a ready lane hands out. One function contacts a
node: `pin_revision` reads the model revision's ref in the shared cache on the head (one `cat`).

The callers materialize a labkit-built model (labkit.tinymodel) into the plan before it gets here.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass

from labkit.errors import LabkitError
from labkit.nodes import Host
from labkit.recipe import LanePlan
from labkit.serve.engines import BootFacts, NodeLaunch, NodeSpec, engine_for
from labkit.serve.fabric import node_addresses
from labkit.serve.runtimes import runtime_for

COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass
class Endpoint:
    """A ready lane: where to send requests and what the boot revealed."""

    lane_id: str
    base_url: str  # http://head:port/v1
    model: str  # served model name, for the "model" field of requests
    head: str
    nodes: list[str]
    boot: BootFacts

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")


def node_specs(
    plan: LanePlan, hosts: list[Host] | None = None, detected: dict[str, str] | None = None
) -> list[NodeSpec]:
    """Nodes as the engines see them: name plus the address peers use, which is the node's fabric address when
    the lane declares a fabric (recipe, else `detected` at boot, else a placeholder for `labkit show`) and
    its management address otherwise."""
    if hosts is None:
        names = [(n, "127.0.0.1" if n == "localhost" else n) for n in plan.cluster.nodes]
    else:
        names = [(h.name, h.address) for h in hosts]
    fabric = node_addresses(plan, [n for n, _ in names], detected)
    return [NodeSpec(n, fabric.get(n) or address, address) for n, address in names]


def python_for(plan: LanePlan, hosts: list[Host] | None = None) -> str:
    """The interpreter for python-launched engines: this one on the local host, `python3` elsewhere."""
    local = hosts is not None and all(h.is_local for h in hosts) or (hosts is None and plan.cluster.is_local)
    return sys.executable if local and plan.engine.runtime == "process" else "python3"


def launches(
    plan: LanePlan, hosts: list[Host] | None = None, detected: dict[str, str] | None = None
) -> list[NodeLaunch]:
    python = python_for(plan, hosts)
    return engine_for(plan).launch(plan, node_specs(plan, hosts, detected), python=python)


def lane_commands(plan: LanePlan, hosts: list[Host] | None = None) -> dict[str, str]:
    """{node: the exact shell command `up` runs there} — pure, for `labkit show` and dry runs."""
    runtime = runtime_for(plan)
    return {
        ln.node: runtime.start_command(ln, plan.engine.image, plan.mounts()) for ln in launches(plan, hosts)
    }


def pin_revision(plan: LanePlan, head: Host) -> LanePlan:
    """The plan with its model revision pinned to a commit, read from refs/<name> on the head node.

    A lane served from the shared HF cache is given snapshots/<commit>; a branch name such as "main" has
    no snapshot folder of its own, so it is resolved the way huggingface_hub does, through refs/.
    Lanes with an explicit model path, a staged view or no shared cache are returned unchanged.
    """
    model = plan.model
    if (
        plan.view is not None
        or model.path
        or not plan.cluster.shared_cache
        or COMMIT.fullmatch(model.revision)
    ):
        return plan
    ref = f"{plan.cluster.shared_cache}/{model.cache_dir_name}/refs/{model.revision}"
    r = head.run(["cat", ref], timeout=30)
    commit = r.stdout.strip()
    if not r.ok or not COMMIT.fullmatch(commit):
        why = r.stderr.strip() or f"it holds {commit[:60]!r}, not a commit hash"
        raise LabkitError(
            f"{head.name}: cannot resolve model revision {model.revision!r} of {model.repo}: {ref}: {why}"
        )
    return dataclasses.replace(plan, model=dataclasses.replace(model, revision=commit))
