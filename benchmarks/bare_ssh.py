"""The baseline SSH client of the speed benchmarks: paramiko alone, none of labkit's code.

Each labkit fan-out figure is printed beside the same SSH work done with this client in the same run, so a
reader sees how much of a 4-node/1-node ratio is the machine (sshd, shells and node-side work of four
"nodes" sharing one host's cores) and how much is labkit.
"""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def fan_out(fn, nodes) -> None:
    """fn(node) for every node at once, one thread each (what HostGroup.map does, without labkit)."""
    with ThreadPoolExecutor(max_workers=len(nodes)) as pool:
        list(pool.map(fn, nodes))


class BareSsh:
    """The baseline SSH client: paramiko alone (known host key required, Nagle off), no labkit code."""

    def __init__(self, cluster: Any, addr: str):
        """`cluster`: a tests.support.nodes.Cluster (its key, known_hosts, port and user)."""
        import paramiko

        self.client = paramiko.SSHClient()
        self.client.set_missing_host_key_policy(paramiko.RejectPolicy())
        self.client.load_host_keys(str(cluster.known_hosts))
        sock = socket.create_connection((addr, cluster.port), timeout=5)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # before the handshake, as OpenSSH does
        self.client.connect(
            addr,
            port=cluster.port,
            username=cluster.user,
            key_filename=str(cluster.key),
            allow_agent=False,
            look_for_keys=False,
            timeout=5,
            sock=sock,
        )

    def run(self, command: str, close: bool = False) -> None:
        ch = self.client.get_transport().open_session()
        ch.exec_command(command)
        ch.shutdown_write()
        while ch.recv(65536):
            pass
        code = ch.recv_exit_status()
        ch.close()
        if close:
            self.close()
        if code:
            raise RuntimeError(f"{command[:80]} exited {code}")

    def close(self) -> None:
        self.client.close()
