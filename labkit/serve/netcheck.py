"""The fabric across interfaces and nodes, as pure functions over what the nodes report: no other interface of
a node on the fabric interface's subnet (a DGX Spark port shows up as two RoCE twins with a netdev each, and
eugr's spark-vllm-docker NETWORKING.md warns against both twins on one subnet: it confuses autodiscovery and
routing), and one MTU on every node's fabric interface (a frame larger than a peer's MTU is dropped, so
mismatched MTUs stall transfers instead of failing them). docs/engines.md, "Pre-boot checks and labkit doctor".
"""

from __future__ import annotations

import ipaddress
import re

from labkit.nodes import Result
from labkit.serve.verdict import FAIL, OK, Check

# Every IPv4 address of every interface, one line each: "4: enP2p1s0f1np1    inet 10.10.0.15/24 brd ... scope global"
ALL_ADDRESSES_COMMAND = "ip -o -4 addr show"
INET_DEV = re.compile(r"^\d+:\s+(\S+?)(?:@\S+)?\s+inet\s+(\d{1,3}(?:\.\d{1,3}){3}/\d{1,2})\b", re.M)
MTU = re.compile(r"\bmtu\s+(\d+)")
CHECK = "fabric net"


def interface_addresses(stdout: str) -> list[tuple[str, ipaddress.IPv4Interface]]:
    """(interface, address/prefix) for every routable IPv4 address in `ip -o -4 addr show` output."""
    out = []
    for dev, text in INET_DEV.findall(stdout):
        try:
            iface = ipaddress.IPv4Interface(text)
        except ValueError:
            continue
        if not iface.ip.is_link_local:
            out.append((dev, iface))
    return out


def same_subnet(interface: str, stdout: str) -> list[str]:
    """Other interfaces with an address on a subnet of `interface`'s, each as "dev A.B.C.D/N"."""
    found = interface_addresses(stdout)
    own = [i.network for d, i in found if d == interface]
    return [f"{d} {i}" for d, i in found if d != interface and any(i.network.overlaps(n) for n in own)]


def mtu_of(link: Result) -> int | None:
    """The MTU in an `ip -o link show dev IF` line, None when it was not read."""
    m = MTU.search(link.stdout) if link.ok else None
    return int(m.group(1)) if m else None


def fabric_net_checks(
    interfaces: str | dict[str, str], links: dict[str, Result], addrs: dict[str, Result], head: str
) -> list[Check]:
    """One check per node read: no other interface on the fabric's subnet, and its fabric MTU equal to the
    head's (or the first node's that reported one), naming the node and the other value. `interfaces` is the
    one fabric interface, or {node: its interface} where nodes use different ports."""
    mtus = {n: m for n, r in links.items() if (m := mtu_of(r)) is not None}
    ref_node = head if head in mtus else next(iter(mtus), None)
    out = []
    for node in links:
        interface = interfaces if isinstance(interfaces, str) else interfaces[node]
        ref_if = interfaces if isinstance(interfaces, str) else interfaces.get(ref_node or "", interface)
        problems: list[str] = []
        facts: dict = {"interface": interface, "mtu": mtus.get(node)}
        r = addrs.get(node)
        clash = same_subnet(interface, r.stdout) if r is not None and r.ok else []
        facts["same_subnet"] = clash
        if clash:
            problems.append(
                f"{', '.join(clash)} on {interface}'s subnet: two interfaces on one subnet confuse routing "
                "(give the other one, e.g. the port's RoCE twin, its own subnet or none)"
            )
        mtu = mtus.get(node)
        if mtu is not None and ref_node is not None and mtu != mtus[ref_node]:
            problems.append(
                f"{interface} mtu {mtu}, but {mtus[ref_node]} on {ref_node}"
                + (f"'s {ref_if}" if ref_if != interface else "")
                + ": the nodes' fabric MTUs differ "
                "(set one MTU on every node)"
            )
        if problems:
            out.append(Check(node, CHECK, FAIL, "; ".join(problems), facts))
        else:
            text = (
                f"mtu {mtu} as on {'every node' if len(set(mtus.values())) == 1 else ref_node}" if mtu else ""
            )
            text += ("; " if text else "") + f"no other interface on {interface}'s subnet"
            out.append(Check(node, CHECK, OK, text, facts))
    return out
