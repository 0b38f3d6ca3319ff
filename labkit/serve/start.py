"""The lane's start, step by step: the plan's model must be built, the pre-boot checks (labkit.serve.checks:
image, fabric, RDMA, memory, GPU; pull, page cache) run and are said, the start command goes to every node in
parallel, and once the boot watch (labkit.serve.watch) saw the lane ready, the boot facts are completed from
the checks. `Lane.start` (labkit.serve.lane) composes them and removes everything on any failure.

Each step reads the `LaneState` (labkit.serve.state) and returns what it learned.
"""

from __future__ import annotations

import time

from labkit.errors import LabkitError
from labkit.recipe import LanePlan
from labkit.serve.bootstate import STATE_CHECK
from labkit.serve.checks import Preflight, preflight
from labkit.serve.devprobe import PROBE_CHECK
from labkit.serve.devprobe_run import probe_devices
from labkit.serve.engines import BootFacts
from labkit.serve.errors import PreflightFailed
from labkit.serve.fabric import is_placeholder
from labkit.serve.plan import Endpoint, launches
from labkit.serve.state import LaneState, Started
from labkit.serve.verdict import OK, WARN
from labkit.serve.watch import node_watches


def refuse_unbuilt_model(plan: LanePlan) -> None:
    """A plan naming a model labkit builds (LanePlan.wants_built_model) is served only once the caller has
    built it and set model.path: serve never builds models (labkit.lab.measure and `labkit up` do it first)."""
    if plan.wants_built_model:
        raise LabkitError(
            f"{plan.file}: model.repo {plan.model.repo} is a model labkit builds; build it before the lane "
            "starts (labkit.tinymodel.materialize(plan), as labkit.lab.measure and `labkit up` do)"
        )


def run_preflight(lane: LaneState, timings: dict[str, float]) -> Preflight:
    """The pre-boot checks on every node at once (labkit.serve.checks.preflight): an absent image is pulled
    first, outside the boot timer; their seconds (and the pull's) go into `timings`."""
    t = time.monotonic()
    report = preflight(lane)
    timings["preflight"] = time.monotonic() - t
    if report.pull_seconds:
        timings["pull"] = report.pull_seconds
    return report


def refuse_or_say(lane: LaneState, report: Preflight) -> None:
    """PreflightFailed with the table of failed checks when one failed (nothing started); else the fabric
    addresses detected on the interface and the checks' outcome said."""
    if report.failed:
        raise PreflightFailed(lane.lane_id, report.checks)
    fabric = lane.plan.cluster.fabric
    if report.addresses and fabric is not None:
        found = ", ".join(f"{n} {a} (detected)" for n, a in sorted(report.addresses.items()))
        lane.say(f"fabric {fabric.interface}: {found}")
    warned = [c for c in report.checks if c.status == WARN]
    lane.say(
        f"pre-boot checks: {sum(c.status == OK for c in report.checks)} passed on {len(lane.group)} node(s)"
        + (f", {len(warned)} warning(s)" if warned else "")
        + f" ({report.seconds:.1f} s)"
    )
    for c in warned:
        lane.say(f"  warning: {c.node}: {c.check}: {c.result}")


def device_probe(lane: LaneState, report: Preflight) -> None:
    """The device probe on every node (labkit.serve.devprobe_run), its checks added to the report: the boot
    facts keep them beside the other pre-boot checks."""
    report.checks += probe_devices(lane, report.facts("image"), report.facts(STATE_CHECK))


def fabric_facts(lane: LaneState, detected: dict[str, str]) -> dict[str, dict[str, str]]:
    """{node: {interface, address, source}} for the boot facts: where each rendezvous address came from."""
    fabric = lane.plan.cluster.fabric
    if fabric is None:
        return {}
    return {
        n: {
            "interface": fabric.interface_of(n),
            "address": fabric.address(n) or detected.get(n, ""),
            "source": "recipe" if fabric.address(n) else "detected at boot",
        }
        for n in lane.group.names
    }


def begin_start(lane: LaneState, detected: dict[str, str]) -> Started:
    """Issue the start command on every node at once (`detected`: the fabric addresses the pre-boot checks
    found); returns at once with the calls, which the caller keeps until they all returned."""
    at = time.monotonic()
    by_node = {ln.node: ln for ln in launches(lane.plan, lane.group.hosts, detected)}
    unresolved = [ln.node for ln in by_node.values() if any(is_placeholder(v) for _, v in ln.env)]
    if unresolved:  # a placeholder is for `labkit show`; never start an engine with one
        raise LabkitError(f"fabric address of {', '.join(unresolved)} was not detected; nothing was started")
    started = Started(at, node_watches(lane, by_node))
    plan, runtime = lane.plan, lane.runtime

    def start(h) -> str:
        cmd = runtime.start_command(by_node[h.name], plan.engine.image, plan.mounts())
        r = h.run(cmd, timeout=plan.engine.boot_timeout).check("start")
        return r.stdout.strip()

    started.calls = lane.group.begin(start)
    return started


def started_everywhere(lane: LaneState, started: Started) -> None:
    """Wait until each start command returned (NodeError names the nodes where one failed)."""
    if started.calls is not None:
        started.calls.results(f"starting lane {lane.lane_id}")
    lane.say(
        f"[{started.elapsed():6.1f}s] started on all nodes; waiting for readiness "
        f"({lane.root_url}{lane.engine.probes(lane.plan)[0].path}, timeout {lane.plan.engine.boot_timeout:g} s)"
    )


def ready_endpoint(
    lane: LaneState, facts: BootFacts, report: Preflight | None, detected: dict[str, str]
) -> Endpoint:
    """The ready lane's endpoint, its boot facts completed with the fabric addresses and the pre-boot checks."""
    endpoint = Endpoint(
        lane.lane_id,
        lane.root_url + "/v1",
        lane.plan.served_name,
        lane.group.head.name,
        lane.group.names,
        facts,
    )
    facts.fabric = fabric_facts(lane, detected)
    if report is not None:
        facts.images = report.facts("image")
        facts.memory = report.facts("memory")
        facts.state = report.facts(STATE_CHECK)
        facts.probe = report.facts(PROBE_CHECK)
        facts.preflight = [c.to_dict() for c in report.checks]
    return endpoint
