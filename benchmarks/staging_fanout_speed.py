"""Fan-out staging against its baselines, measured in the same run (issue 17, item 3; docs/fanout.md):

    1 node                 one node copies the hot shards from the throttled NAS;
    4 independent copies   every node reads every shard from the NAS itself (today's staging);
    4-node fan-out         each shard read from the NAS once, passed node to node (labkit.stage.fan_out).

Goal: fan-out <= 1.3x the 1-node time; the independent copies take ~4x. The "NAS" is a stand-in on this
machine: the fan-out's peer script (labkit/stage/node/peer.py and its parts) serving the shared cache's blobs on 127.0.0.1, capped at one byte rate
for all its readers together and counting the bytes it sends (so the NAS reads of each case are printed
too). The nodes are the four sshd test nodes (tests/support/nodes.py: 127.0.0.2-5, each with its own tmpfs,
started here, root needed); the three cases run through the same code (`fan_out` with a one-node plan, a
plan without fan-out, and the fan-out plan), interleaved per round.

Usage: python benchmarks/staging_fanout_speed.py [--shard-mb 96] [--nas-mbps 40] [--rounds 2] [--keep]
Writes only to a temp folder (removed at the end unless --keep).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.fanout import Meter  # noqa: E402
from labkit.nodes.group import host_for
from labkit.stage.fanout import FanoutFile, plan_fanout
from labkit.stage.fanout_run import PeerTimeouts, fan_out  # noqa: E402
from labkit.stage.peer_ops import peer_script  # noqa: E402
from tests.support.hf_cache import make_cache  # noqa: E402

DISK = "/srv/labkit-fanout-bench-disk"
SHARDS = ("model-00047-of-00048.safetensors", "model-00048-of-00048.safetensors")


def log(msg: str) -> None:
    print(msg, flush=True)


class ThrottledNas:
    """peer.py serving the cache's blobs on 127.0.0.1 at `rate` bytes/s in all; counts the bytes it sent."""

    def __init__(self, snap: Path, names, rate: float, readers):
        self.sent, self.lock = 0, threading.Lock()
        self.tokens = {n: secrets.token_hex(16) for n in names}  # a peer server's token opens one file
        files = [
            {
                "name": n,
                "size": (snap / n).stat().st_size,
                "path": str((snap / n).resolve()),
                "tokens": {self.tokens[n]: "node"},
            }
            for n in names
        ]
        request = {"bind": "127.0.0.1", "allow": list(readers), "files": files, "expect": {}, "rate": rate}
        request.update(lifetime=3600, idle=3600, stall=60, spend=False)  # one token for every read, unspent
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", peer_script(), "serve", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.proc.stdin.write(json.dumps(request))
        self.proc.stdin.close()
        first = json.loads(self.proc.stdout.readline())
        if first.get("event") != "listening":
            raise RuntimeError(f"the NAS stand-in did not start: {first}")
        self.endpoint = {"address": first["address"], "port": first["port"], "tokens": self.tokens}
        threading.Thread(target=self._count, daemon=True).start()

    def _count(self) -> None:
        for line in self.proc.stdout:
            ev = json.loads(line)
            if ev.get("event") == "served":
                with self.lock:
                    self.sent += ev["bytes"]

    def take(self) -> int:
        """Bytes sent since the last call."""
        with self.lock:
            sent, self.sent = self.sent, 0
        return sent

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def bench_fanout(root: Path, shard_mb: int = 96, nas_mbps: float = 40.0, rounds: int = 2) -> dict | None:
    """Time the three cases; print them with their ratios. None when the sshd nodes cannot run here."""
    from tests.support.nodes import ADDRESSES, Cluster, sshd_available

    why = sshd_available() or (None if os.geteuid() == 0 else "needs root (private tmpfs per node)")
    if why:
        log(f"[fan-out] skipped: {why}")
        return None
    size = shard_mb * 1024 * 1024
    snap = make_cache(root / "nas" / "hub", {"config.json": b"{}\n", **{n: os.urandom(size) for n in SHARDS}})
    files = [FanoutFile(n, size, f"{snap}/{n}") for n in SHARDS]
    disk = f"{int(2.5 * 2 * shard_mb) + 16}m"
    cluster = Cluster(root / "nodes", disk_path=DISK, disk_size=disk).start()
    hosts = [host_for(a, None, 22, 5, cluster.ssh_options()) for a in ADDRESSES]
    nas = ThrottledNas(snap, SHARDS, nas_mbps * 1e6, ADDRESSES)
    cases = {
        "1 node": (hosts[:1], plan_fanout({hosts[0].name: files})),
        "4 independent copies": (hosts, plan_fanout({h.name: files for h in hosts}, fanout=False)),
        "4-node fan-out": (hosts, plan_fanout({h.name: files for h in hosts})),
    }
    times: dict[str, list[float]] = {c: [] for c in cases}
    read: dict[str, int] = {}
    cpu: list[float] = []
    try:
        for r in range(rounds):
            for case, (group, plan) in cases.items():
                dst = f"{DISK}/view-{r}"
                meter = Meter()
                fan_out(
                    group,
                    plan,
                    dst,
                    binds={h.name: h.name for h in group},
                    nas=nas.endpoint,
                    peer=PeerTimeouts(),
                )
                window = meter.stop()
                times[case].append(window.seconds)
                read[case] = nas.take()
                if case == "4-node fan-out" and window.machine_cpu is not None:
                    cpu.append(window.machine_cpu)
                for h in group:
                    h.run(["rm", "-rf", dst]).check("clean the view")
    finally:
        nas.close()
        for h in hosts:
            h.close()
        cluster.stop()
    med = {c: statistics.median(t) for c, t in times.items()}
    total = len(SHARDS) * size
    log(
        f"[fan-out] {len(SHARDS)} shards x {shard_mb} MiB; NAS stand-in capped at {nas_mbps:g} MB/s for all "
        f"readers together; four sshd nodes (127.0.0.2-5, own tmpfs each); median of {rounds} interleaved rounds"
    )
    for case in cases:
        log(
            f"  {case:22s}: {med[case]:6.2f} s   NAS read {read[case] / total:.2f}x the shards   "
            f"{med[case] / med['1 node']:.2f}x the 1-node time"
        )
    ratio = med["4-node fan-out"] / med["1 node"]
    log(f"  fan-out / 1 node      : {ratio:.2f}x (goal <= 1.3x) {'OK' if ratio <= 1.3 else 'MISSED'}")
    log(f"  independent / 1 node  : {med['4 independent copies'] / med['1 node']:.2f}x (expected ~4x)")
    if cpu:
        cpus = os.cpu_count() or 1
        log(
            f"  (this machine's CPU during a fan-out: {statistics.mean(cpu):.1f} s on {cpus} CPUs, i.e. at least "
            f"{statistics.mean(cpu) / cpus:.1f} s of wall time: four nodes' hashing and copies share these CPUs)"
        )
    return {"seconds": med, "ratio": ratio}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shard-mb", type=int, default=96, help="MiB per shard (two shards)")
    ap.add_argument(
        "--nas-mbps", type=float, default=40.0, help="the NAS stand-in's cap, MB/s for all readers"
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="labkit-fanout-bench-"))
    log(f"temp folder {root}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f} at start")
    try:
        bench_fanout(root, args.shard_mb, args.nas_mbps, args.rounds)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
