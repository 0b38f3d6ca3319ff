"""Where commands run: a node name in, a `Host` out (local or over SSH), and a group that runs one call on
every node in parallel, with interrupts handled so a Ctrl-C reaches every node.

Its modules, each with what it is for: docs/architecture.md, "Packages" (generated from their docstrings).
"""

from labkit.nodes.addresses import all_addresses, no_address, routable
from labkit.nodes.base import CommandTimeout, Host, HostError, Result
from labkit.nodes.group import HostGroup, NodeCalls, check_reachable, each_node, hosts_for_plan, map_nodes
from labkit.nodes.interrupts import ENDING_SIGNALS, ending_as_interrupt, ignoring_interrupts, interrupts_noted
from labkit.nodes.ssh import SshOptions

__all__ = [
    "ENDING_SIGNALS",
    "CommandTimeout",
    "Host",
    "HostError",
    "HostGroup",
    "NodeCalls",
    "Result",
    "SshOptions",
    "all_addresses",
    "check_reachable",
    "each_node",
    "ending_as_interrupt",
    "hosts_for_plan",
    "ignoring_interrupts",
    "interrupts_noted",
    "map_nodes",
    "no_address",
    "routable",
]
