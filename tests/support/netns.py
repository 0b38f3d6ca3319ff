"""Four nodes in four network namespaces, cabled three ways at once, each with a real OpenSSH server on its
management address (docs/cluster-topology.md, "How the tests model it"):

    mgmt0  every namespace on one /24 through a bridge in the test's own namespace, which has an address on it
           too, so the test process reaches each node's sshd (the management network, 10.A.0.10+i)
    fab0   every namespace on another /24 through a second bridge (a QSFP switch, 10.A.1.10+i)
    ring0  a veth to the next namespace and ring1 from the previous one, each link its own /30 (a switchless
           ring: node i's ring0 is 10.A.2.(4i+1), node i+1's ring1 10.A.2.(4i+2))

Commands run with the real `ip` and `ping` (PATH: a shim dir with `python`/`python3` and an `ibdev2netdev` that
lists RoCE devices on ring0, ring1 and fab0 (IBDEV), then the system's).
`stop()` removes the sshds, every process the session started, the namespaces (their veths go with them) and
the bridges, whatever state `start()` got to; `netns_available()` says why not when it cannot run.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from labkit.nodes import SshOptions
from tests.support.nodes import REPO, SSHD, kill_processes, session_processes

NODES = 4
IBDEV = (
    "rocep1s0f0 port 1 ==> ring0 (Up)",
    "rocep1s0f1 port 1 ==> ring1 (Up)",
    "roceP2p1s0f1 port 1 ==> fab0 (Up)",
)


def netns_available() -> str | None:
    """None when the namespaces can be built here, else the reason to skip."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "ping", "ssh-keygen"):
        if not shutil.which(tool):
            return f"{tool} not installed" + (" (apt-get install iputils-ping)" if tool == "ping" else "")
    if not os.path.exists(SSHD):
        return f"{SSHD} not installed (apt-get install openssh-server)"
    probe = f"lkprobe{os.getpid() % 100000}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


def _free_octet() -> int:
    """A second octet A for 10.A.0.0/16 that no interface here uses yet."""
    used = _ip("-o", "-4", "addr", "show").stdout
    for a in random.sample(range(100, 200), 100):
        if f" 10.{a}." not in used:
            return a
    raise RuntimeError("no free 10.A.0.0/16 for the namespaces")


class NetnsCluster:
    """The four namespaced nodes of one test module; `start()` then `stop()`."""

    def __init__(self, root: Path):
        self.root = root
        self.tag = uuid.uuid4().hex[:6]
        self.token = uuid.uuid4().hex
        self.octet = 0
        self.names = [f"lk{self.tag}n{i}" for i in range(NODES)]  # namespace names
        self.bridges = (f"lkm{self.tag}", f"lkf{self.tag}")
        self.key = root / "client"
        self.known_hosts = root / "known_hosts"
        self._procs: list[subprocess.Popen] = []

    # ---------------------------------------------------------------- addresses

    def mgmt(self, i: int) -> str:
        return f"10.{self.octet}.0.{10 + i}"

    def fab(self, i: int) -> str:
        return f"10.{self.octet}.1.{10 + i}"

    def ring0(self, i: int) -> str:
        """Node i's address on the cable to node i+1."""
        return f"10.{self.octet}.2.{4 * i + 1}"

    def ring1(self, i: int) -> str:
        """Node i's address on the cable from node i-1."""
        return f"10.{self.octet}.2.{4 * ((i - 1) % NODES) + 2}"

    @property
    def addresses(self) -> list[str]:
        """The nodes as labkit names them: their management addresses."""
        return [self.mgmt(i) for i in range(NODES)]

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> NetnsCluster:
        self.root.mkdir(parents=True, exist_ok=True)
        self.octet = _free_octet()
        os.makedirs("/run/sshd", exist_ok=True)
        self._cable()
        self._keys()
        for i in range(NODES):
            self._sshd(i)
        return self

    def _cable(self) -> None:
        mgmt_br, fab_br = self.bridges
        for br in self.bridges:
            _ip("link", "add", br, "type", "bridge")
            _ip("link", "set", br, "up")
        _ip("addr", "add", f"10.{self.octet}.0.1/24", "dev", mgmt_br)
        for i, ns in enumerate(self.names):
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
            for br, inner, address in ((mgmt_br, "mgmt0", self.mgmt(i)), (fab_br, "fab0", self.fab(i))):
                outer = f"{br}{i}"
                _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", ns)
                _ip("link", "set", outer, "master", br, "up")
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", inner)
                _ip("-n", ns, "link", "set", inner, "up")
        for i, ns in enumerate(self.names):
            nxt = self.names[(i + 1) % NODES]
            _ip("link", "add", "ring0", "netns", ns, "type", "veth", "peer", "name", "ring1", "netns", nxt)
            _ip("-n", ns, "addr", "add", f"{self.ring0(i)}/30", "dev", "ring0")
            _ip("-n", nxt, "addr", "add", f"{self.ring1((i + 1) % NODES)}/30", "dev", "ring1")
        for ns in self.names:
            for dev in ("ring0", "ring1"):
                _ip("-n", ns, "link", "set", dev, "up")

    def _keys(self) -> None:
        for name in ("host", "client"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.root / name)], check=True
            )
        shutil.copy(self.root / "client.pub", self.root / "authorized_keys")
        host_pub = (self.root / "host.pub").read_text().split()
        self.known_hosts.write_text("".join(f"{a} {host_pub[0]} {host_pub[1]}\n" for a in self.addresses))
        shim = self.root / "shim"
        shim.mkdir(exist_ok=True)
        for name in ("python", "python3"):
            (shim / name).write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
            (shim / name).chmod(0o755)
        # the RoCE devices a Spark would list, on the namespaces' netdevs: both ring ports, and the switch port
        (shim / "ibdev2netdev").write_text(
            "#!/bin/sh\nprintf '%s\\n' " + " ".join(f"'{line}'" for line in IBDEV) + "\n"
        )
        (shim / "ibdev2netdev").chmod(0o755)

    def _sshd(self, i: int) -> None:
        d = self.root / self.names[i]
        (d / "state").mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": f"{self.root / 'shim'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LABKIT_TEST_NODE": f"n{i}",
            "LABKIT_STATE_DIR": str(d / "state"),
            "LABKIT_TEST_SESSION": self.token,
            "PYTHONPATH": str(REPO),
            "SHLVL": "1",
        }
        cfg = d / "sshd_config"
        cfg.write_text(
            "\n".join(
                [
                    "Port 22",
                    f"ListenAddress {self.mgmt(i)}",
                    f"HostKey {self.root / 'host'}",
                    f"PidFile {d / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin prohibit-password",
                    "MaxStartups 100",
                    "MaxSessions 100",
                    "SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()),
                    "",
                ]
            )
        )
        with open(d / "sshd.log", "ab") as log:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", self.names[i], SSHD, "-D", "-e", "-f", str(cfg)],
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
            )
        self._procs.append(proc)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection((self.mgmt(i), 22), timeout=0.5):
                    return
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"sshd in {self.names[i]} did not start: {(d / 'sshd.log').read_text()[-500:]}"
                    )
                time.sleep(0.02)

    def stop(self) -> None:
        """Everything `start()` made, each step tried whatever failed before it."""
        kill_processes(self.token)
        for proc in self._procs:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        kill_processes(self.token)
        for (
            ns
        ) in self.names:  # sshd's per-connection children carry no session token: whatever is left inside
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        for link in self.outer_links + list(self.bridges):  # a veth's outer end takes the inner one with it
            _ip("link", "del", link, check=False)
        for ns in self.names:
            _ip("netns", "del", ns, check=False)

    # ---------------------------------------------------------------- for tests

    def ssh_options(self) -> SshOptions:
        return SshOptions(
            user="root",
            port=22,
            key_files=(str(self.key),),
            known_hosts=str(self.known_hosts),
            connect_timeout=5,
            use_agent=False,
        )

    def cli_env(self) -> dict[str, str]:
        """Environment for a `labkit` subprocess that should reach these nodes."""
        return {
            "LABKIT_SSH_KEY": str(self.key),
            "LABKIT_SSH_KNOWN_HOSTS": str(self.known_hosts),
            "LABKIT_SSH_USER": "root",
            "LABKIT_SSH_PORT": "22",
        }

    def processes(self) -> list[tuple[int, str]]:
        return session_processes(self.token)

    @property
    def outer_links(self) -> list[str]:
        """The veth ends in the test's own namespace (one per node and bridge)."""
        return [f"{br}{i}" for br in self.bridges for i in range(NODES)]

    def leftovers(self) -> list[str]:
        """Namespaces, bridges and outer veth ends of this cluster still present (none after `stop()`)."""
        spaces = _ip("netns", "list").stdout.split()
        links = [
            line.split(":")[1].strip().split("@")[0] for line in _ip("-o", "link", "show").stdout.splitlines()
        ]
        return [n for n in self.names if n in spaces] + [
            x for x in self.outer_links + list(self.bridges) if x in links
        ]
