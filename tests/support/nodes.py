"""Four fake cluster nodes for tests: real OpenSSH sshd on 127.0.0.2-5, each with its own PATH and disk.

Each node is an `sshd -D` on its own loopback address (one free port shared by all), started inside a private
mount namespace with its own small tmpfs at `disk_path` when `unshare` works (else without a private disk).
Every command a node runs sees (via sshd's SetEnv):
    PATH                 the node's own tools dir (ib_write_bw, all_reduce_perf: Cluster.hide_tool), then the shim dir: a recording `docker` shim, `ip`, `ping`, `nvidia-smi` and `ibdev2netdev` shims
                         (tests/support/*_shim.py), `python`/`python3` = this interpreter and
                         `vllm` = the vllm command beside it (when `make env-vllm` installed one)
    LABKIT_TEST_NODE     dgx5 ... dgx8
    LABKIT_STATE_DIR     a per-node state dir (the process runtime's pid/log files)
    LABKIT_SHIM_STATE    where the docker shim keeps containers and its call log
    LABKIT_TEST_SESSION  a token; every process started on a node inherits it, so leftovers can be found
    PYTHONPATH           this checkout, so `python -m labkit.sim` runs the code under test
    SHLVL=1              so bash does not source the developer's ~/.bashrc per command (unless user_rc=True)
Host keys are trusted through a known_hosts file written here, never by disabling checking.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from labkit.nodes import SshOptions

SSHD = "/usr/sbin/sshd"
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
NODE_NAMES = {a: f"dgx{5 + i}" for i, a in enumerate(ADDRESSES)}
REPO = Path(__file__).resolve().parents[2]
SHIMS = {
    "docker": "docker_shim.py",
    "ip": "ip_shim.py",
    "nvidia-smi": "nvidia_smi_shim.py",
    "ibdev2netdev": "ibdev2netdev_shim.py",
    "ping": "ping_shim.py",
}
# Fabric measuring tools (perftest, nccl-tests), in a directory of each node's own so that a test can take one
# away from one node (Cluster.hide_tool); Cluster.reset_shims() puts them back.
NODE_TOOLS = {"ib_write_bw": "ib_write_bw_shim.py", "all_reduce_perf": "all_reduce_perf_shim.py"}
# Per-node files the shims read (tests/support/*_shim.py), removed by Cluster.reset_shims().
NODE_SHIM_FILES = (
    "ip.json",
    "images.json",
    "foreign.json",
    "pull_fail",
    "nvidia-smi.json",
    "ibdev2netdev.txt",
    "ping.json",
    "ib_write_bw.txt",
    "ib_write_bw.jsonl",
    "all_reduce_perf.txt",
)


def sshd_available() -> str | None:
    """None when the nodes can run, else the reason to skip."""
    if not os.path.exists(SSHD):
        return f"{SSHD} not installed (apt-get install openssh-server)"
    if not shutil.which("ssh-keygen"):
        return "ssh-keygen not installed"
    return None


def _free_port(addresses) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind((addresses[0], 0))
            port = s.getsockname()[1]
        ok = True
        for addr in addresses:
            with socket.socket() as s:
                try:
                    s.bind((addr, port))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError("no free port on the test addresses")


def _unshare_works() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True)
    return r.returncode == 0


class Cluster:
    """The four nodes of one test session; `start()` then `stop()` (which also kills leftovers)."""

    def __init__(
        self,
        root: Path,
        disk_path: str = "/srv/labkit-test-disk",
        disk_size: str = "64m",
        user_rc: bool = False,
    ):
        self.root = root
        self.user_rc = user_rc  # True: commands source the user's ~/.bashrc as on a stock node (benchmarks)
        self.disk_path = disk_path
        self.disk_size = disk_size
        self.addresses = ADDRESSES
        self.token = uuid.uuid4().hex
        self.port = 0
        self.key = root / "client"
        self.known_hosts = root / "known_hosts"
        self.shim_dir = root / "shim"
        self.shim_state = root / "shim-state"
        self.user = "root" if os.geteuid() == 0 else os.environ.get("USER", "root")
        self.private_disks = False
        self._procs: dict[str, subprocess.Popen] = {}

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> Cluster:
        self.root.mkdir(parents=True, exist_ok=True)
        os.makedirs("/run/sshd", exist_ok=True) if os.geteuid() == 0 else None
        for name in ("host", "client"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.root / name)], check=True
            )
        shutil.copy(self.root / "client.pub", self.root / "authorized_keys")
        self._write_shim()
        self.port = _free_port(self.addresses)
        host_pub = (self.root / "host.pub").read_text().split()
        self.known_hosts.write_text(
            "".join(f"[{a}]:{self.port} {host_pub[0]} {host_pub[1]}\n" for a in self.addresses)
        )
        self.private_disks = _unshare_works()
        for addr in self.addresses:
            self.start_node(addr)
        return self

    def _write_shim(self) -> None:
        self.shim_dir.mkdir(exist_ok=True)
        # docker; iproute2 as on a Spark ("lo" and a fabric port "cx7"); the GB10's nvidia-smi; the RoCE listing
        for name, source in SHIMS.items():
            shim = self.shim_dir / name
            shim.write_text(f"#!{sys.executable}\n" + (Path(__file__).parent / source).read_text())
            shim.chmod(0o755)
        for name in ("python", "python3"):
            p = self.shim_dir / name
            p.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
            p.chmod(0o755)
        for addr in self.addresses:
            self._write_tools(addr)
        vllm = Path(sys.executable).parent / "vllm"
        if vllm.exists():  # a node's PATH has vllm, as on a real node with vLLM installed
            (self.shim_dir / "vllm").write_text(f'#!/bin/sh\nexec {vllm} "$@"\n')
            (self.shim_dir / "vllm").chmod(0o755)

    def tool_dir(self, addr: str) -> Path:
        return self.root / NODE_NAMES[addr] / "tools"

    def _write_tools(self, addr: str) -> None:
        d = self.tool_dir(addr)
        d.mkdir(parents=True, exist_ok=True)
        for name, source in NODE_TOOLS.items():
            tool = d / name
            tool.write_text(f"#!{sys.executable}\n" + (Path(__file__).parent / source).read_text())
            tool.chmod(0o755)

    def hide_tool(self, addr: str, name: str) -> None:
        """Take a fabric tool (NODE_TOOLS) off one node's PATH, as on a node without perftest or nccl-tests."""
        (self.tool_dir(addr) / name).unlink(missing_ok=True)

    def image_tool(self, addr: str, name: str) -> None:
        """Put a fabric tool (NODE_TOOLS) into the node's copy of the image only: the docker shim's foreground
        `run --rm` finds it, the node's own shell does not."""
        self.hide_tool(addr, name)
        d = self.shim_state / NODE_NAMES[addr] / "image-tools"
        d.mkdir(parents=True, exist_ok=True)
        tool = d / name
        tool.write_text(f"#!{sys.executable}\n" + (Path(__file__).parent / NODE_TOOLS[name]).read_text())
        tool.chmod(0o755)

    def _config(self, addr: str) -> Path:
        node = NODE_NAMES[addr]
        d = self.root / node
        d.mkdir(exist_ok=True)
        (self.root / "state" / node).mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": f"{self.tool_dir(addr)}:{self.shim_dir}:/usr/local/bin:/usr/bin:/bin",
            "LABKIT_TEST_NODE": node,
            "LABKIT_STATE_DIR": str(self.root / "state" / node),
            "LABKIT_SHIM_STATE": str(self.shim_state),
            "LABKIT_TEST_SESSION": self.token,
            "PYTHONPATH": str(REPO),
        }
        if not self.user_rc:
            # bash sources ~/.bashrc for a command run by sshd only when SHLVL < 2 (Debian's SSH_SOURCE_BASHRC):
            # keep the developer's dotfiles (pyenv/conda init: ~130 ms of CPU and a PATH with other pythons
            # ahead of the shim dir, per command) out of the nodes, so every command pays only sshd + shell.
            env["SHLVL"] = "1"
        cfg = d / "sshd_config"
        cfg.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    f"ListenAddress {addr}",
                    f"HostKey {self.root / 'host'}",
                    f"PidFile {d / 'sshd.pid'}",
                    f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin prohibit-password",
                    "Subsystem sftp internal-sftp",
                    "MaxStartups 100",
                    "MaxSessions 100",
                    "SetEnv " + " ".join(f"{k}={v}" for k, v in env.items()),
                    "",
                ]
            )
        )
        return cfg

    def start_node(self, addr: str) -> None:
        cfg = self._config(addr)
        subprocess.run([SSHD, "-t", "-f", str(cfg)], check=True)
        if self.private_disks:
            script = (
                f"mkdir -p {self.disk_path} && mount -t tmpfs -o size={self.disk_size} tmpfs {self.disk_path} "
                f"&& exec {SSHD} -D -e -f {cfg}"
            )
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
        else:
            argv = [SSHD, "-D", "-e", "-f", str(cfg)]
        with open(self.root / NODE_NAMES[addr] / "sshd.log", "ab") as log:
            self._procs[addr] = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection((addr, self.port), timeout=0.5):
                    break
            except OSError:
                if self._procs[addr].poll() is not None or time.monotonic() > deadline:
                    text = (self.root / NODE_NAMES[addr] / "sshd.log").read_text()
                    raise RuntimeError(f"sshd on {addr} did not start: {text[-500:]}")
                time.sleep(0.02)

    def stop_node(self, addr: str) -> None:
        proc = self._procs.pop(addr, None)
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self) -> None:
        self.kill_leftovers()
        for addr in list(self._procs):
            self.stop_node(addr)
        self.kill_leftovers()

    # ---------------------------------------------------------------- for tests

    def ssh_options(self) -> SshOptions:
        return SshOptions(
            user=self.user,
            port=self.port,
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
            "LABKIT_SSH_USER": self.user,
            "LABKIT_SSH_PORT": str(self.port),
        }

    def set_docker_delay(self, seconds: float) -> None:
        """Make every node's docker shim sleep this long per call (a slow daemon); 0 turns it off."""
        self.shim_state.mkdir(parents=True, exist_ok=True)
        f = self.shim_state / "delay"
        if seconds:
            f.write_text(str(seconds))
        else:
            f.unlink(missing_ok=True)

    def set_interfaces(self, addr: str, interfaces: dict | None) -> None:
        """Change what the node's `ip` shim reports (see tests/support/ip_shim.py); None restores the default."""
        d = self.shim_state / NODE_NAMES[addr]
        d.mkdir(parents=True, exist_ok=True)
        if interfaces is None:
            (d / "ip.json").unlink(missing_ok=True)
        else:
            (d / "ip.json").write_text(json.dumps(interfaces))

    def _node_file(self, addr: str, name: str, text: str | None) -> None:
        d = self.shim_state / NODE_NAMES[addr]
        d.mkdir(parents=True, exist_ok=True)
        if text is None:
            (d / name).unlink(missing_ok=True)
        else:
            (d / name).write_text(text)

    def set_images(self, addr: str, images: dict | None) -> None:
        """{image: ID or None (absent)} for the node's docker shim; images not listed are present (None restores)."""
        self._node_file(addr, "images.json", None if images is None else json.dumps(images))

    def plant_containers(self, addr: str, containers: list[dict] | None) -> None:
        """Running containers of someone else on the node ([{"name", "image", "labels"}]; None removes them)."""
        self._node_file(addr, "foreign.json", None if containers is None else json.dumps(containers))

    def set_gpu_apps(self, addr: str, apps: list[dict] | None) -> None:
        """Compute processes the node's nvidia-smi lists ([{"pid", "process_name", "used_memory"}])."""
        self._node_file(addr, "nvidia-smi.json", None if apps is None else json.dumps({"apps": apps}))

    def set_rdma(self, addr: str, text: str | None) -> None:
        """What the node's ibdev2netdev prints (None: the Spark's two RoCE twins, "" no device)."""
        self._node_file(addr, "ibdev2netdev.txt", text)

    def set_pull(self, addr: str, fail: str | None = None, delay: float = 0) -> None:
        """Make `docker pull` fail on the node with `fail` (None: succeed); `delay`: seconds every pull takes."""
        self._node_file(addr, "pull_fail", fail)
        f = self.shim_state / "pull_delay"
        f.write_text(str(delay)) if delay else f.unlink(missing_ok=True)

    def reset_shims(self) -> None:
        """Every node's shims back to their defaults (interfaces, images, containers, GPU, RDMA, pulls)."""
        for addr in self.addresses:
            for name in NODE_SHIM_FILES:
                self._node_file(addr, name, None)
            shutil.rmtree(self.shim_state / NODE_NAMES[addr] / "image-tools", ignore_errors=True)
            self._write_tools(addr)
        (self.shim_state / "pull_delay").unlink(missing_ok=True)

    def break_node(self, addr: str, line: str | None) -> None:
        """Make the node's next containers print `line` and exit 1 (None repairs it)."""
        d = self.shim_state / NODE_NAMES[addr]
        d.mkdir(parents=True, exist_ok=True)
        if line is None:
            (d / "crash_on_run").unlink(missing_ok=True)
        else:
            (d / "crash_on_run").write_text(line)

    def calls(self, addr: str) -> list[list[str]]:
        """Every `docker` argv the node's shim recorded, oldest first."""
        f = self.shim_state / NODE_NAMES[addr] / "calls.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []

    def clear_calls(self) -> None:
        for f in self.shim_state.glob("*/calls.jsonl"):
            f.unlink()

    def containers(self, addr: str) -> list[str]:
        """Names of shim containers still recorded on the node (running or exited)."""
        d = self.shim_state / NODE_NAMES[addr] / "containers"
        return sorted(p.stem for p in d.glob("*.json")) if d.exists() else []

    def processes(self) -> list[tuple[int, str]]:
        """Live (non-zombie) processes started on any node this session: [(pid, cmdline)]."""
        return session_processes(self.token)

    def kill_leftovers(self) -> None:
        kill_processes(self.token)


def session_processes(token: str) -> list[tuple[int, str]]:
    """Live processes whose environment carries LABKIT_TEST_SESSION=token (this process excluded)."""
    needle = f"LABKIT_TEST_SESSION={token}".encode()
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            stat = (entry / "stat").read_text()
            if stat.rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        out.append((int(entry.name), cmd))
    return out


def kill_processes(token: str) -> None:
    for pid, _ in session_processes(token):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
