"""The lane's start: check the nodes, pin the model revision, refuse a lane already present, run the pre-boot
checks (labkit.serve.checks: image, fabric, RDMA, memory, GPU; pull, page cache), start every node in
parallel, watch the boot to readiness, then read memory on every node and the KV pool from the API
(labkit.serve.readyfacts); on any failure (Ctrl-C included) remove everything.

The functions take the `Lane` (labkit.serve.lane) they start; its plan is already materialized by the caller.
"""

from __future__ import annotations

import json
import time

from labkit.errors import LabkitError
from labkit.nodes import Host, check_reachable, ending_as_interrupt, ignoring_interrupts
from labkit.serve.checks import preflight
from labkit.serve.errors import PreflightFailed
from labkit.serve.fabric import is_placeholder
from labkit.serve.plan import Endpoint, pin_revision
from labkit.serve.readyfacts import after_ready
from labkit.serve.teardown import remove_after_failed_start
from labkit.serve.verdict import OK, WARN
from labkit.serve.watch import node_watches, wait_ready


def refuse_unbuilt_model(plan) -> None:
    """A plan naming a model labkit builds (LanePlan.wants_built_model) is served only once the caller has
    built it and set model.path: serve never builds models (labkit.lab.measure and `labkit up` do it first)."""
    if plan.wants_built_model:
        raise LabkitError(
            f"{plan.file}: model.repo {plan.model.repo} is a model labkit builds; build it before the lane "
            "starts (labkit.tinymodel.materialize(plan), as labkit.lab.measure and `labkit up` do)"
        )


def start(lane) -> Endpoint:
    """Check nodes, start every node in parallel, wait for readiness. On any failure, remove everything."""
    refuse_unbuilt_model(lane.plan)
    t = time.monotonic()
    check_reachable(lane.group)
    lane.timings = {"check": time.monotonic() - t}
    lane.plan = pin_revision(lane.plan, lane.group.head)
    lane.refuse_if_present()
    run_preflight(lane)
    lane.say(
        f"lane {lane.lane_id}: starting {lane.plan.engine.kind} on {len(lane.group)} node(s) "
        f"({', '.join(lane.group.names)})"
    )
    if lane.run_dir:
        (lane.run_dir / "logs").mkdir(parents=True, exist_ok=True)
    try:
        with ending_as_interrupt():
            lane.started_at = time.monotonic()
            lane.start_all()
            lane.timings["start"] = lane.elapsed()
            facts = wait_ready(lane)
            lane.timings["ready"] = facts.boot_seconds or lane.elapsed()
            after_ready(lane, facts)  # memory on every node, the KV pool from log and API (outside the timer)
    except BaseException as e:
        with ignoring_interrupts():
            if isinstance(e, KeyboardInterrupt):
                lane.say("interrupted: removing the lane on every node")
            remove_after_failed_start(lane)
        raise
    endpoint = Endpoint(
        lane.lane_id,
        lane.root_url + "/v1",
        lane.plan.served_name,
        lane.group.head.name,
        lane.group.names,
        facts,
        lane.run_dir,
    )
    facts.fabric = fabric_facts(lane)
    if lane.preflight is not None:
        facts.images = lane.preflight.facts("image")
        facts.memory = lane.preflight.facts("memory")
        facts.preflight = [c.to_dict() for c in lane.preflight.checks]
    if lane.run_dir:
        (lane.run_dir / "boot.json").write_text(json.dumps(facts.to_dict(), indent=2) + "\n")
    lane.say(f"lane {lane.lane_id}: ready at {endpoint.base_url} after {facts.boot_seconds:.1f} s")
    return endpoint


def run_preflight(lane) -> None:
    """The pre-boot checks on every node at once (labkit.serve.checks.preflight): an absent image is pulled
    first, outside the boot timer; PreflightFailed with the table of failed checks when one fails (nothing
    started). Sets `lane.preflight` and the fabric addresses detected on the interface."""
    t = time.monotonic()
    report = preflight(lane)
    lane.preflight = report
    lane.timings["preflight"] = time.monotonic() - t
    if report.pull_seconds:
        lane.timings["pull"] = report.pull_seconds
    if report.failed:
        raise PreflightFailed(lane.lane_id, report.checks)
    lane.fabric_addresses = report.addresses
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


def fabric_facts(lane) -> dict[str, dict[str, str]]:
    """{node: {interface, address, source}} for the boot facts: where each rendezvous address came from."""
    fabric = lane.plan.cluster.fabric
    if fabric is None:
        return {}
    return {
        n: {
            "interface": fabric.interface,
            "address": fabric.address(n) or lane.fabric_addresses.get(n, ""),
            "source": "recipe" if fabric.address(n) else "detected at boot",
        }
        for n in lane.group.names
    }


def start_all(lane) -> None:
    """Issue the start command on every node at once and wait until each returned (NodeError names failures).

    `lane.starts` keeps the calls until the teardown has seen them all return: a start cannot be recalled.
    """
    by_node = {ln.node: ln for ln in lane.launches()}
    unresolved = [ln.node for ln in by_node.values() if any(is_placeholder(v) for _, v in ln.env)]
    if unresolved:  # a placeholder is for `labkit show`; never start an engine with one
        raise LabkitError(f"fabric address of {', '.join(unresolved)} was not detected; nothing was started")
    lane.watched = node_watches(lane, by_node)

    def start(h: Host) -> str:
        cmd = lane.runtime.start_command(by_node[h.name], lane.plan.engine.image, lane.plan.mounts())
        r = h.run(cmd, timeout=lane.plan.engine.boot_timeout).check("start")
        return r.stdout.strip()

    lane.starts = lane.group.begin(start)
    lane.starts.results(f"starting lane {lane.lane_id}")
    lane.say(
        f"[{lane.elapsed():6.1f}s] started on all nodes; waiting for readiness "
        f"({lane.root_url}{lane.engine.probes(lane.plan)[0].path}, timeout {lane.plan.engine.boot_timeout:g} s)"
    )
