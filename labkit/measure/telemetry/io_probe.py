"""I/O counters sampled around a run: the hook interface and the local NFS reader (docs/engines.md, "NFS read accounting").

A probe's `sample()` returns a flat {counter: number} snapshot; `delta(before, after)` the per-run change. The
bench calls every probe before the first and after the last request of a run and stores the deltas. A node
plugs in the same way over its host (NodeNfsProbe, below).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from labkit.errors import LabkitError
from labkit.nodes import Host, each_node

BYTES_FIELDS = (
    "normalreadbytes",
    "normalwritebytes",
    "directreadbytes",
    "directwritebytes",
    "serverreadbytes",
    "serverwritebytes",
    "readpages",
    "writepages",
)


class IOProbe(Protocol):
    """Anything that can snapshot per-host I/O counters."""

    name: str

    def sample(self) -> dict[str, float]: ...


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before for every counter present in both; a negative value (remount, reboot) is dropped and
    reported as `<key>.reset` = 1 so nobody mistakes it for zero I/O."""
    out: dict[str, float] = {}
    for key, value in after.items():
        if key not in before:
            continue
        d = value - before[key]
        if d < 0:
            out[key + ".reset"] = 1.0
        else:
            out[key] = d
    return out


def parse_mountstats(text: str) -> dict[str, dict[str, int]]:
    """{mount point: {bytes field: value}} for every nfs/nfs4 mount in /proc/self/mountstats text."""
    mounts: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        words = line.split()
        if line.startswith("device "):
            current = None
            # device <export> mounted on <mnt> with fstype <fs> [statvers=...]
            if "mounted" in words and "fstype" in words:
                fs = words[words.index("fstype") + 1]
                mnt = " ".join(words[words.index("on") + 1 : words.index("with")])
                if fs in ("nfs", "nfs4"):
                    current = mnt
                    mounts[mnt] = {}
            continue
        if current is not None and words and words[0] == "bytes:":
            values = [int(v) for v in words[1:]]
            mounts[current].update(zip(BYTES_FIELDS, values, strict=False))
    return mounts


class LocalNfsProbe:
    """This host's NFS byte counters (serverreadbytes is the wire truth; mmap reads miss normalreadbytes)."""

    name = "localhost-nfs"

    def __init__(self, path: str | Path = "/proc/self/mountstats"):
        self.path = Path(path)

    def sample(self) -> dict[str, float]:
        try:
            text = self.path.read_text()
        except OSError:
            return {}
        out: dict[str, float] = {}
        for mnt, fields in parse_mountstats(text).items():
            for key, value in fields.items():
                out[f"{mnt}:{key}"] = float(value)
        return out


def server_read_bytes(deltas: dict[str, float]) -> float:
    """Total Δserverreadbytes over all mounts in a probe delta."""
    return sum(v for k, v in deltas.items() if k.endswith(":serverreadbytes"))


class NodeNfsProbe:
    """One node's NFS byte counters read over its host, shaped like IOProbe (`name` + `sample()` ->
    {"<mount>:<field>": value}), so a run can sample every launch node before and after and store the
    per-node `serverreadbytes` delta (the lab note's "shared-NFS reads during a run" column)."""

    def __init__(self, host: Host):
        self.host = host
        self.name = f"{host.name}-nfs"

    def sample(self) -> dict[str, float]:
        return {
            f"{mnt}:{key}": float(v)
            for mnt, fields in read_mountstats(self.host).items()
            for key, v in fields.items()
        }


def read_mountstats(host: Host) -> dict[str, dict[str, int]]:
    """{mount: counters} of one host's mount namespace (the host's, not a container's)."""
    r = host.run(["cat", "/proc/self/mountstats"], timeout=30)
    if r.exit_code != 0:
        raise LabkitError(f"{host.name}: cannot read /proc/self/mountstats: {r.stderr.strip()}")
    return parse_mountstats(r.stdout)


def nfs_counters(hosts: Iterable[Host]) -> dict[str, dict[str, dict[str, int]]]:
    """{node: {mount: counters}} read over each host at once; one NodeError naming every node that failed."""
    return each_node(hosts, read_mountstats, "NFS counters")


def nfs_read_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """{node: serverreadbytes read over NFS between two `nfs_counters` snapshots} (all NFS mounts)."""
    out = {}
    for node, mounts in after.items():
        prev = before.get(node, {})
        out[node] = sum(
            c.get("serverreadbytes", 0) - prev.get(m, {}).get("serverreadbytes", 0) for m, c in mounts.items()
        )
    return out
