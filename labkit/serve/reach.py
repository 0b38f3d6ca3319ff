"""Can every node reach the head's rendezvous address on its own fabric interface? As pure functions: the
probe command each node runs, its parser, and one `reach` check per node (docs/cluster-topology.md, "The
reachability check").

Why: in a switchless ring every cable is its own pair of subnets, so the head's address on a fabric port is
reachable only from the neighbour on that cable; every other pre-boot check passes there, and the boot waits in
rendezvous until the timeout. The probe is `ping` from the node's own address on its interface (`-I`), as eugr's
NETWORKING.md checks a ring's links with ping: a head address without a route from there fails at once. Two nodes with one address are refused too (the rendezvous could not tell them apart). Pure:
labkit.serve.reach_run runs the probes.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from dataclasses import dataclass

from labkit.nodes import Result
from labkit.recipe import LanePlan, ring_advice
from labkit.serve.netcheck import interface_addresses
from labkit.serve.verdict import FAIL, OK, SKIP, WARN, Check

CHECK = "reach"
COUNT, INTERVAL, WAIT = 3, 0.2, 2  # three echoes 0.2 s apart (the shortest a non-root user may ask), 2 s wait
RECEIVED = re.compile(r"(\d+) (?:packets )?received")


def probe_command(source: str, target: str) -> str:
    """`ping` from the node's own fabric address `source` to `target`, numeric, a few echoes. The source address,
    not the device: bound to a device, Linux takes a destination without a route as on-link and the head answers
    the ARP from its other port (weak host model), so a ring's back neighbour would pass; bound to the address the
    echo needs a route, as the engines' sockets bound to that address do."""
    argv = ["ping", "-n", "-c", str(COUNT), "-i", str(INTERVAL), "-W", str(WAIT), "-I", source, target]
    return shlex.join(argv)


@dataclass(frozen=True)
class Probe:
    """What one node's probe showed: `reached` when an echo came back; `missing` when the node has no ping."""

    reached: bool
    text: str
    missing: bool = False


def parse_probe(r: Result) -> Probe:
    """A `ping` Result: reached when at least one echo was received; otherwise why, in ping's words."""
    m = RECEIVED.search(r.stdout)
    received = int(m.group(1)) if m else 0
    if received:
        return Probe(True, f"{received}/{COUNT} echoes answered")
    if r.exit_code == 127:  # the shell's "command not found"
        return Probe(False, "ping is not installed on the node (iputils-ping)", missing=True)
    lines = [ln.strip() for ln in (r.stderr + "\n" + r.stdout).splitlines() if ln.strip()]
    stats = [ln for ln in lines if "packet loss" in ln]
    why = stats[-1] if stats else (lines[-1] if lines else f"ping exit {r.exit_code}")
    return Probe(False, why.removeprefix("ping: "))


def own_network(interface: str, r: Result | None) -> ipaddress.IPv4Interface | None:
    """The node's first routable address/prefix on `interface`, from its `ip -o -4 addr show dev IF` reading."""
    if r is None or not r.ok:
        return None
    found = [i for d, i in interface_addresses(r.stdout) if d == interface]
    return found[0] if found else None


def subnet_note(head: str, target: str, own: ipaddress.IPv4Interface | None) -> str:
    """Why the probe could not work, when the node's interface is on another subnet than the head's address."""
    if own is None or ipaddress.ip_address(target) in own.network:
        return ""
    return (
        f"; its address {own} is on another subnet than {head}'s {target}, as on point-to-point cabling "
        "(each cable of a ring is its own subnet)"
    )


def reach_checks(
    plan: LanePlan,
    head: str,
    addresses: dict[str, str | None],
    networks: dict[str, ipaddress.IPv4Interface | None],
    probes: dict[str, Result | str],
) -> list[Check]:
    """One `reach` check per node of `addresses` ({node: its rendezvous address, None when unknown}): the head's
    address answered the node's probe (`probes`: its Result, or why it could not run), no other node has the
    same address. A failure names the node, its interface and the head's address, and what to set."""
    fabric = plan.cluster.fabric
    assert fabric is not None
    target = addresses.get(head)
    owners: dict[str, list[str]] = {}
    for node, address in addresses.items():
        if address:
            owners.setdefault(address, []).append(node)
    out = []
    for node, address in addresses.items():
        iface = fabric.interface_of(node)
        facts = {"interface": iface, "source": address, "target": target, "head": head}
        twins = [n for n in owners.get(address or "", []) if n != node]
        if twins:
            text = f"{address} on {iface} is also {', '.join(twins)}'s address: every node needs its own"
            out.append(Check(node, CHECK, FAIL, text, facts))
        elif node == head:
            out.append(Check(node, CHECK, OK, f"the rendezvous host: {target} on {iface}", facts))
        elif target is None or address is None:
            who = head if target is None else node
            out.append(
                Check(node, CHECK, SKIP, f"not checked: {who}'s address on the fabric is not known", facts)
            )
        else:
            out.append(_probed(plan, node, head, iface, target, networks.get(node), probes.get(node), facts))
    return out


def _probed(
    plan: LanePlan,
    node: str,
    head: str,
    iface: str,
    target: str,
    own: ipaddress.IPv4Interface | None,
    probe: Result | str | None,
    facts: dict,
) -> Check:
    """One node's verdict from its probe."""
    if isinstance(probe, str) or probe is None:
        return Check(node, CHECK, FAIL, f"cannot probe {target}: {probe or 'not run'}", facts)
    p = parse_probe(probe)
    facts["probe"] = p.text
    if p.reached:
        return Check(
            node, CHECK, OK, f"reaches {head}'s rendezvous address {target} on {iface} ({p.text})", facts
        )
    if p.missing:
        return Check(
            node, CHECK, WARN, f"{p.text}: could not check that {target} is reachable on {iface}", facts
        )
    fabric = plan.cluster.fabric
    assert fabric is not None  # reach_checks runs only for a lane with a fabric
    if fabric.ring:
        advice = (
            f"a ring's rendezvous goes over the management network: {iface} must reach every node "
            f"({plan.file}: cluster.fabric.interface)"
        )
    else:
        advice = f"{ring_advice(iface)} ({plan.file})"
    text = (
        f"cannot reach {head}'s rendezvous address {target} on {iface}: {p.text}"
        f"{subnet_note(head, target, own)}; the boot would wait in rendezvous until its timeout. {advice}"
    )
    return Check(node, CHECK, FAIL, text, facts)
