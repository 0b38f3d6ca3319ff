"""Do the RoCE ports look cabled point to point while the recipe says `topology = "switch"`? As pure functions
over the pre-boot readings (`ibdev2netdev`'s HCA-to-netdev lines and every interface's addresses); check
`cabling` (docs/cluster-topology.md, "The cabling check").

Why: a ring whose `interface` already names the management port passes the reachability check (the rendezvous
works), and NCCL's RDMA connections between non-neighbours then time out at the first collective. On a switch
every node's port is on one subnet shared by all nodes; on a ring or a three-node mesh each port's subnet is
shared by exactly two nodes (one cable). With three or more nodes that is unambiguous; two nodes on one cable
look the same either way, so they are never judged.
"""

from __future__ import annotations

import ipaddress

from labkit.nodes import Result
from labkit.recipe import LanePlan
from labkit.serve.netcheck import interface_addresses
from labkit.serve.preflight import parse_rdma
from labkit.serve.verdict import FAIL, Check

CHECK = "cabling"
Port = tuple[str, ipaddress.IPv4Interface]  # (netdev, its address/prefix)


def hca_ports(hcas: tuple[str, ...], rdma: Result | None, addresses: Result | None) -> list[Port]:
    """The addressed netdevs behind the recipe's HCAs, from `ibdev2netdev` (the sysfs listing names no netdev)
    and `ip -o -4 addr show`."""
    if rdma is None or addresses is None or not rdma.ok or not addresses.ok:
        return []
    devices, _ = parse_rdma(rdma)
    netdevs = {nd for hca in hcas for _, nd, _ in devices.get(hca.partition(":")[0], []) if nd}
    return [(d, i) for d, i in interface_addresses(addresses.stdout) if d in netdevs]


def cabling_checks(plan: LanePlan, ports: dict[str, list[Port]]) -> list[Check]:
    """A FAIL per node when a switch lane of three or more nodes has every node's HCA ports on subnets that
    at most two nodes share (one cable each); nothing when that cannot be told or the ports share a subnet."""
    fabric = plan.cluster.fabric
    if fabric is None or fabric.ring or len(ports) < 3 or not all(ports.values()):
        return []
    holders: dict[ipaddress.IPv4Network, set[str]] = {}
    for node, found in ports.items():
        for _, iface in found:
            holders.setdefault(iface.network, set()).add(node)
    if max(len(n) for n in holders.values()) >= 3:
        return []  # one subnet for three or more nodes: a switch
    out = []
    for node, found in ports.items():
        links = []
        for dev, iface in found:
            others = sorted(holders[iface.network] - {node})
            links.append(f"{dev} {iface} with {', '.join(others) or 'no other node'}")
        text = (
            f"the RoCE ports are cabled point to point ({'; '.join(links)}: no subnet is shared by more than two "
            "nodes, as on a switchless ring or mesh), but topology is switch: NCCL's RDMA connections between "
            f'non-neighbours would time out; set [cluster.fabric] topology = "ring" ({plan.file})'
        )
        facts = {"ports": [[d, str(i)] for d, i in found]}
        out.append(Check(node, CHECK, FAIL, text, facts))
    return out
