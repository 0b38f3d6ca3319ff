"""Serving speed checks, measured against a baseline in the same run (never asserted in unit tests).

1. Readiness latency: how long after the engine became ready did Lane.start() notice it?
   "Became ready" = the simulator's port first accepts a connection (the vLLM-flavoured sim binds only after
   its boot lines, like vLLM); a watcher thread probes it every 2 ms on this host's monotonic clock.
   "Noticed" = Lane.started_at + boot_seconds (same clock). Target: <= 1 s.
2. Parallelism: node check (fresh SSH connections + a trivial command) and start (the docker start commands)
   on 4 sshd nodes vs 1 node. Target: 4 nodes <= 1.5x one node. Each is printed next to a baseline measured
   in the same run doing the same SSH work without labkit (bare paramiko; OpenSSH's client for the check):
   the baseline's ratio is what this machine allows (four "nodes" share its cores), the rest is labkit's.
   Each 4-node figure also prints the floor the nodes' CPU use puts under it (benchmarks/fanout.py).
   --user-rc makes the nodes source the user's ~/.bashrc per command, as a stock sshd node does.

Runs the simulator locally (process runtime) and, when /usr/sbin/sshd exists, on four loopback sshd nodes
(docker runtime via the test shim). Writes only to a temp dir. Usage: python benchmarks/serve_speed.py [--reps N] [--user-rc]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bare_ssh import BareSsh, fan_out  # noqa: E402
from benchmarks.fanout import Meter, Window, metered, time_pair  # noqa: E402
from labkit.nodes import HostGroup, check_reachable
from labkit.nodes.group import host_for
from labkit.serve import Lane  # noqa: E402
from labkit.store import RunFolderSink
from tests.support.lanes import sim_recipe  # noqa: E402
from tests.support.nodes import Cluster, kill_processes, sshd_available  # noqa: E402

PORT = 18390


def first_accept(addr: str, port: int, stop: threading.Event, out: dict) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection((addr, port), timeout=0.05):
                out["t"] = time.monotonic()
                return
        except OSError:
            time.sleep(0.002)


def readiness_once(lane: Lane, addr: str, port: int) -> float:
    stop, out = threading.Event(), {}
    watcher = threading.Thread(target=first_accept, args=(addr, port, stop, out), daemon=True)
    watcher.start()
    try:
        endpoint = lane.start()
        noticed = lane.started_at + endpoint.boot.boot_seconds
    finally:
        stop.set()
        lane.down()
    watcher.join(1)
    if "t" not in out:
        raise RuntimeError("watcher never saw the port accept")
    return noticed - out["t"]


def show_latency(label: str, values: list[float]) -> None:
    print(
        f"  {label}: readiness noticed {statistics.median(values):.3f} s (median) / {max(values):.3f} s (max) "
        f"after the engine bound its port, n={len(values)}; target <= 1 s -> "
        f"{'OK' if max(values) <= 1.0 else 'MISSED'}"
    )


def local_readiness(tmp: Path, reps: int) -> None:
    os.environ["LABKIT_STATE_DIR"] = str(tmp / "state")
    token = uuid.uuid4().hex
    os.environ["LABKIT_TEST_SESSION"] = token
    plan = sim_recipe(tmp / "bench-local", PORT, settings={"boot_weights_s": 1.0, "boot_init_s": 0.5})
    lane = Lane(plan, sink=RunFolderSink(tmp / "run-local"), progress=None)
    try:
        show_latency("local, process runtime", [readiness_once(lane, "127.0.0.1", PORT) for _ in range(reps)])
    finally:
        kill_processes(token)


def compare(what: str, fn, reps: int, target: float | None = 1.5) -> None:
    print("  " + time_pair(fn, reps).line(what, target), flush=True)


class MeteredLane(Lane):
    """A Lane that also meters its start step (the Window of timings["start"]: the start commands on every
    node, and the engines' first CPU after them)."""

    start_window: Window | None = None

    def start_all(self) -> None:
        meter = Meter()
        super().start_all()
        self.start_window = meter.stop()


def cluster_checks(cluster: Cluster, tmp: Path, reps: int) -> None:
    opts = cluster.ssh_options()
    plan4 = sim_recipe(
        tmp / "bench-4x",
        PORT + 1,
        nodes=cluster.addresses,
        runtime="docker",
        ssh_port=cluster.port,
        user=cluster.user,
        settings={"boot_weights_s": 1.0, "boot_init_s": 0.5},
    )
    lane = Lane(plan4, ssh=opts, sink=RunFolderSink(tmp / "run-4x"), progress=None)
    try:
        show_latency(
            "4 sshd nodes, docker shim",
            [readiness_once(lane, cluster.addresses[0], PORT + 1) for _ in range(reps)],
        )
    finally:
        lane.close()

    def check_time(n: int) -> float:
        group = HostGroup([host_for(a, None, 22, 5, opts) for a in cluster.addresses[:n]])
        try:
            return metered(lambda: check_reachable(group))
        finally:
            group.close()

    def start_plan(n: int):
        return sim_recipe(
            tmp / f"bench-start-{n}",
            PORT + 2,
            nodes=cluster.addresses[:n],
            runtime="docker",
            ssh_port=cluster.port,
            user=cluster.user,
            settings={"boot_weights_s": 0.2},
        )

    def start_time(n: int) -> Window:
        lane = MeteredLane(start_plan(n), ssh=opts, progress=None)
        try:
            lane.start()
            return lane.start_window
        finally:
            lane.down()
            lane.close()

    def bare_start_time(n: int) -> Window:
        """Baseline: the lane's exact start commands over bare paramiko connections, none of labkit."""
        lane = Lane(start_plan(n), ssh=opts, progress=None)
        commands = lane.commands()
        bare = {a: BareSsh(cluster, a) for a in cluster.addresses[:n]}
        try:
            fan_out(lambda a: bare[a].run("true"), list(bare))  # as warm as the lane's, which ran its checks
            return metered(lambda: fan_out(lambda a: bare[a].run(commands[a]), list(bare)))
        finally:
            for b in bare.values():
                b.close()
            lane.down()
            lane.close()

    def bare_check_time(n: int) -> Window:
        """Baseline: fresh paramiko connect + `true`, one thread per node, none of labkit."""
        return metered(
            lambda: fan_out(lambda a: BareSsh(cluster, a).run("true", close=True), cluster.addresses[:n])
        )

    def openssh_check_time(n: int) -> Window:
        """Baseline: OpenSSH's `ssh node true`, one process per node (no Python at all)."""
        argv = [
            "ssh",
            "-i",
            str(cluster.key),
            "-o",
            f"UserKnownHostsFile={cluster.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-p",
            str(cluster.port),
            "-l",
            cluster.user,
        ]

        def run() -> None:
            procs = [
                subprocess.Popen([*argv, a, "true"], stdin=subprocess.DEVNULL) for a in cluster.addresses[:n]
            ]
            if any(p.wait() for p in procs):
                raise RuntimeError("ssh true failed")

        return metered(run)

    warm = {a: BareSsh(cluster, a) for a in cluster.addresses}
    group = HostGroup([host_for(a, None, 22, 5, opts) for a in cluster.addresses])
    check_reachable(group)  # connect once; the timed runs reuse the connections

    def labkit_warm(n: int) -> Window:
        return metered(lambda: HostGroup(group.hosts[:n]).run("true", "true"))

    def bare_warm(n: int) -> Window:
        return metered(lambda: fan_out(lambda a: warm[a].run("true"), cluster.addresses[:n]))

    # All four "nodes" share this host's CPUs, so node-side CPU work (sshd fork+exec per session, the docker
    # shim's Python start-up) cannot overlap here as it would on four machines. Each labkit figure is paired
    # with a baseline doing the same SSH work with none of labkit, measured in the same run: the baseline's
    # ratio is the machine's share, the difference is labkit's.
    try:
        compare("node check (fresh SSH connect + `true`), labkit check_reachable", check_time, reps)
        compare("    baseline: bare paramiko connect + `true`", bare_check_time, reps, None)
        compare("    baseline: OpenSSH client `ssh node true`", openssh_check_time, reps, None)
        compare("one command on warm connections, labkit HostGroup.run(`true`)", labkit_warm, reps)
        compare("    baseline: bare paramiko exec `true`", bare_warm, reps, None)
        compare("start commands (docker shim, raw), labkit Lane start step", start_time, reps)
        compare("    baseline: the same start commands over bare paramiko", bare_start_time, reps, None)
        cluster.set_docker_delay(0.5)
        try:
            compare(
                "start commands (docker shim, 0.5 s node-side latency per call), labkit", start_time, reps
            )
            compare("    baseline: the same over bare paramiko", bare_start_time, reps, None)
        finally:
            cluster.set_docker_delay(0)
    finally:
        group.close()
        for b in warm.values():
            b.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--user-rc", action="store_true", help="nodes source ~/.bashrc per command (stock sshd)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    print(
        f"serve_speed: {os.cpu_count()} CPUs, load average {load:.1f} at start (figures are noisy when this "
        "exceeds the CPU count); all times from monotonic clocks on this host"
    )
    with tempfile.TemporaryDirectory(prefix="labkit-serve-speed-") as d:
        tmp = Path(d)
        local_readiness(tmp, args.reps)
        reason = sshd_available()
        if reason:
            print(f"  sshd nodes skipped: {reason}")
            return 0
        cluster = Cluster(tmp / "nodes", user_rc=args.user_rc)
        try:
            cluster.start()
            cluster_checks(cluster, tmp, args.reps)
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
