"""The fabric a lane's engines talk over (`[cluster.fabric]`), as data: each node's fabric address, the command
that detects one on a node and its parser, and the NCCL/GLOO/TP/UCX environment the interface implies.

The management name (cluster.nodes) stays the SSH and client address; engines get the fabric address as
`*_HOST_IP` and in their rendezvous flags (docs/engines.md, "Fabric addresses and environment"). Pure: the
lane's start runs `detect_command` on the nodes (labkit.serve.start).
"""

from __future__ import annotations

import shlex

from labkit.errors import LabkitError
from labkit.nodes import all_addresses, no_address, routable
from labkit.recipe import LanePlan, mesh_env


def placeholder(node: str, interface: str) -> str:
    """What `labkit show` prints where a node's fabric address goes until the boot detects it."""
    return f"<{node} {interface} address, detected at boot>"


def is_placeholder(address: str) -> bool:
    return address.startswith("<") and address.endswith(", detected at boot>")


def detect_command(interface: str) -> str:
    """The node-side command whose output `parse_address` reads (iproute2, present on every DGX OS node)."""
    return f"ip -o -4 addr show dev {shlex.quote(interface)}"


def parse_address(node: str, interface: str, stdout: str, stderr: str = "", ok: bool = True) -> str:
    """The first routable IPv4 address of `interface` in `ip -o -4 addr show` output (link-local ones skipped:
    `routable`); LabkitError naming the node if none."""
    found = all_addresses(stdout) if ok else []
    usable = routable(found)
    if usable:
        return usable[0]
    why = no_address(found) if ok else stderr.strip() or "no IPv4 address on it"
    raise LabkitError(f"{node}: cannot detect the fabric address of {interface}: {why}")


def node_addresses(
    plan: LanePlan, names: list[str], detected: dict[str, str] | None = None
) -> dict[str, str | None]:
    """{node: fabric address} from the recipe, else from the boot's detection, else a placeholder; {} when the
    lane declares no fabric (peers then use the management addresses)."""
    fabric = plan.cluster.fabric
    if fabric is None:
        return {}
    detected = detected or {}
    return {n: fabric.address(n) or detected.get(n) or placeholder(n, fabric.interface_of(n)) for n in names}


def undetected(plan: LanePlan, names: list[str]) -> list[str]:
    """Nodes whose fabric address the recipe does not give (the boot detects them)."""
    fabric = plan.cluster.fabric
    return [] if fabric is None else [n for n in names if not fabric.address(n)]


def fabric_env(plan: LanePlan, node: str | None = None) -> dict[str, str]:
    """The communication libraries pointed at `node`'s fabric interface (and its RoCE HCAs), plus a ring's mesh
    set (labkit.recipe.topology); recipe env wins. With HCAs, `NCCL_NET=IB` makes a failed IB/RoCE init an
    error instead of a silent fall back to sockets, and NCCL_DEBUG=INFO for INIT,NET prints the transport it chose
    into the boot log (docs/engines.md, "NCCL transport lines")."""
    fabric = plan.cluster.fabric
    if fabric is None:
        return {}
    iface = fabric.interface_of(node)
    env = {
        "NCCL_SOCKET_IFNAME": iface,
        "GLOO_SOCKET_IFNAME": iface,
        "TP_SOCKET_IFNAME": iface,
        "UCX_NET_DEVICES": iface,
        "NCCL_IGNORE_CPU_AFFINITY": "1",
    }
    if fabric.rdma:
        env.update(
            {
                "NCCL_IB_HCA": ",".join(fabric.hcas),
                "NCCL_IB_DISABLE": "0",
                "NCCL_NET": "IB",
                "NCCL_CROSS_NIC": "1",
                # NCCL's INIT and NET lines say which transport it chose: read into the boot facts
                "NCCL_DEBUG": "INFO",
                "NCCL_DEBUG_SUBSYS": "INIT,NET",
            }
        )
    env.update(mesh_env(fabric.topology, len(plan.cluster.nodes)))
    return env
