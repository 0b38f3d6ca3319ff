"""The lane's start: check the nodes, pin the model revision, refuse a lane already present, start every
node in parallel, watch the boot to readiness; on any failure (Ctrl-C included) remove everything.

The functions take the `Lane` (labkit.serve.lane) they start; its plan is already materialized by the caller.
"""

from __future__ import annotations

import json
import time

from labkit.errors import LabkitError
from labkit.nodes import Host, check_reachable, each_node, ending_as_interrupt, ignoring_interrupts
from labkit.serve.fabric import detect_command, is_placeholder, parse_address, undetected
from labkit.serve.plan import Endpoint, pin_revision
from labkit.serve.teardown import remove_after_failed_start
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
    lane.fabric_addresses = detect_fabric(lane)
    lane.refuse_if_present()
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
    if lane.run_dir:
        (lane.run_dir / "boot.json").write_text(json.dumps(facts.to_dict(), indent=2) + "\n")
    lane.say(f"lane {lane.lane_id}: ready at {endpoint.base_url} after {facts.boot_seconds:.1f} s")
    return endpoint


def detect_fabric(lane) -> dict[str, str]:
    """{node: fabric address} read on every node the recipe gives none for (`ip -o -4 addr show dev IF`), all
    at once, before anything starts; one NodeError naming every node without an address on the interface."""
    missing = set(undetected(lane.plan, lane.group.names))
    if not missing:
        return {}
    iface = lane.plan.cluster.fabric.interface

    def one(h: Host) -> str:
        r = h.run(detect_command(iface), timeout=30)
        return parse_address(h.name, iface, r.stdout, r.stderr, r.ok)

    hosts = [h for h in lane.group.hosts if h.name in missing]
    found = each_node(hosts, one, f"fabric address detection on {iface} (nothing was started)")
    lane.say("fabric " + iface + ": " + ", ".join(f"{n} {a} (detected)" for n, a in sorted(found.items())))
    return found


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
