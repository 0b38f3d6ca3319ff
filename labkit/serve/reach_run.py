"""Running the reachability probes (labkit.serve.reach) on a lane's nodes, once the pre-boot readings gave every
node's fabric address: every node but the head pings the head's address on its own interface, all at once.
Run by the pre-boot checks, so a boot and `labkit doctor` both refuse a fabric that would hang in rendezvous.
"""

from __future__ import annotations

from labkit.nodes import Host, HostError, Result
from labkit.serve.cabling import cabling_checks, hca_ports
from labkit.serve.preflight import Readings, detected_addresses
from labkit.serve.reach import own_network, probe_command, reach_checks
from labkit.serve.state import LaneState
from labkit.serve.verdict import Check

PROBE_TIMEOUT = 30.0  # seconds for one node's ping (it gives up after about 2.5 s itself)


def reach(lane: LaneState, readings: dict[str, Readings]) -> list[Check]:
    """The `reach` check of every node that answered, for a lane with a fabric and more than one node, and the
    `cabling` check (labkit.serve.cabling) when its RoCE ports look point to point under a switch topology."""
    plan = lane.plan
    fabric = plan.cluster.fabric
    if fabric is None or len(lane.group) < 2:
        return []
    head = lane.group.head.name
    read = {n: rd for n, rd in readings.items() if not rd.error}
    detected = detected_addresses(plan, readings)
    addresses = {n: fabric.address(n) or detected.get(n) for n in read}
    target = addresses.get(head)
    probes: dict[str, Result | str] = {}
    hosts = [h for h in lane.group if h.name in read and h.name != head and addresses.get(h.name)]
    if target and hosts:

        def probe(h: Host) -> Result:
            return h.run(probe_command(addresses[h.name] or "", target), timeout=PROBE_TIMEOUT)

        for node, (r, err) in lane.group.begin(probe, hosts).outcomes().items():
            probes[node] = r if r is not None else (err.message if isinstance(err, HostError) else str(err))
    networks = {n: own_network(fabric.interface_of(n), rd.results.get("addresses")) for n, rd in read.items()}
    ports = {
        n: hca_ports(fabric.hcas, rd.results.get("rdma"), rd.results.get("all_addresses"))
        for n, rd in read.items()
    }
    return reach_checks(plan, head, addresses, networks, probes) + cabling_checks(plan, ports)
