"""IPv4 addresses as `ip -o -4 addr show` lists them, and which of them a node can be reached at: read by the
serve step (fabric addresses for the engine) and the stage step (where a fan-out server binds), so both skip
the same link-local addresses (docs/engines.md, "Fabric addresses and environment")."""

from __future__ import annotations

import ipaddress
import re

# `ip -o -4 addr show dev IF` prints one line per IPv4 address: "3: enp1s0f1np1    inet 192.168.177.11/24 brd ..."
INET = re.compile(r"\sinet\s+(\d{1,3}(?:\.\d{1,3}){3})/\d+")


def routable(addresses: list[str]) -> list[str]:
    """The addresses an engine can be given, in order: link-local ones (IPv4 169.254/16, IPv6 fe80::/10) are
    skipped, since the kernel assigns them to a port without a configured address (or a DHCP that failed) and
    they are neither unique across links nor routed (docs/engines.md, "Fabric addresses and environment")."""
    return [a for a in addresses if not ipaddress.ip_address(a).is_link_local]


def no_address(found: list[str]) -> str:
    """Why an interface whose addresses are `found` has none to use."""
    if found:
        return f"only link-local addresses ({', '.join(found)}), which are not routed: give it a routable one"
    return "no IPv4 address"


def all_addresses(stdout: str) -> list[str]:
    """Every IPv4 address in `ip -o -4 addr show` output, in the order listed."""
    return [a for a in INET.findall(stdout) if _valid(a)]


def _valid(address: str) -> bool:
    try:
        ipaddress.ip_address(address)
    except ValueError:
        return False
    return True
