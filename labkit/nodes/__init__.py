"""Where commands run: a node name in, a `Host` out (local or over SSH), and a group that runs one call on
every node in parallel, with interrupts handled so a Ctrl-C reaches every node.
"""

from labkit.nodes.hosts import (
    CommandTimeout,
    Host,
    HostError,
    HostGroup,
    LocalHost,
    NodeCalls,
    Result,
    SshHost,
    SshOptions,
    Unreachable,
    as_command,
    check_reachable,
    host_for,
    hosts_for_plan,
    map_nodes,
)
from labkit.nodes.interrupts import ENDING_SIGNALS, ending_as_interrupt, ignoring_interrupts, interrupts_noted

__all__ = [
    "ENDING_SIGNALS", "CommandTimeout", "Host", "HostError", "HostGroup", "LocalHost", "NodeCalls", "Result",
    "SshHost", "SshOptions", "Unreachable", "as_command", "check_reachable", "ending_as_interrupt", "host_for",
    "hosts_for_plan", "ignoring_interrupts", "interrupts_noted", "map_nodes",
]
