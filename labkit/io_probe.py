"""I/O counters sampled around a run: the hook interface and the local NFS reader (engines.md §9).

A probe's `sample()` returns a flat {counter: number} snapshot; `delta(before, after)` the per-run change. The
bench calls every probe before the first and after the last request of a run and stores the deltas. Remote
hosts plug in by implementing the same two methods over SSH (staging owns that; the parser here is shared).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

BYTES_FIELDS = ("normalreadbytes", "normalwritebytes", "directreadbytes", "directwritebytes",
                "serverreadbytes", "serverwritebytes", "readpages", "writepages")


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
                mnt = " ".join(words[words.index("on") + 1:words.index("with")])
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
