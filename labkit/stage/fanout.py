"""Fan-out planning (pure, no I/O): which node reads each hot shard from the shared cache, who pulls it from
whom over the fabric, and where each receiver turns when its source fails (docs/fanout.md, "The plan").

Every file goes down one chain: its head (a node already holding a verified copy, or the NAS) feeds the
first receiver, and each receiver feeds the next while it is still receiving (labkit/stage/node/peer.py
serves the bytes a node has written). So each shard is read from the NAS once, by the receiver with the
fewest NAS bytes so far (the reads spread over the nodes, largest file first), and every node sends and
receives each file at most once. A receiver's fallbacks are the nodes ahead of it in the chain, nearest
first, then the NAS. `fanout=False` gives every receiver its own read of the NAS (the independent copies).
The requests for the node-side ops are built here too, so they can be checked without a node.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from labkit.errors import LabkitError
from labkit.stage.node.script import PARTIAL_PREFIX

NAS = "nas"  # the label of a read from the shared cache in requests, events and reports
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class FanoutFile:
    """One file to deliver: its name in the view, size, snapshot entry in the shared cache (what a NAS read
    opens) and expected SHA-256 (None: the node takes the blob name that entry's link resolves to)."""

    name: str
    size: int
    src: str
    sha256: str | None = None


@dataclass(frozen=True)
class Chain:
    """One file's way to its receivers: from `head` (None: the NAS) to receivers[0], then each receiver from
    the one before it."""

    file: FanoutFile
    receivers: tuple[str, ...]
    head: str | None = None

    def sources(self, node: str) -> tuple[str | None, ...]:
        """Where `node` pulls from, in order: the nodes ahead of it (nearest first), the head, the NAS (None)."""
        ahead = self.receivers[: self.receivers.index(node)]
        return (*reversed(ahead), *((self.head,) if self.head else ()), None)

    def pulls_from(self, node: str) -> int:
        """How many receivers pull this file from `node` when nothing fails (0 or 1)."""
        if node == self.head:
            return 1
        return int(node in self.receivers[:-1])


@dataclass(frozen=True)
class FanoutPlan:
    """The chains of every file; `nodes` in the caller's order."""

    nodes: tuple[str, ...]
    chains: tuple[Chain, ...]

    def receiving(self, node: str) -> list[Chain]:
        return [c for c in self.chains if node in c.receivers]

    def serving(self, node: str) -> dict[str, int]:
        """{file: expected pulls} of the files `node` serves."""
        return {c.file.name: k for c in self.chains if (k := c.pulls_from(node))}

    def nas_reads(self) -> dict[str, list[str]]:
        """{file: nodes that read it from the NAS} when nothing fails."""
        out: dict[str, list[str]] = {}
        for c in self.chains:
            out.setdefault(c.file.name, []).extend(c.receivers[:1] if c.head is None else [])
        return out

    def bytes_for(self, node: str) -> int:
        return sum(c.file.size for c in self.receiving(node))

    @property
    def total_bytes(self) -> int:
        return sum(c.file.size * len(c.receivers) for c in self.chains)

    def describe(self) -> list[str]:
        """One line per chain: `name: nas -> dgx5 -> dgx6 ...`."""
        return [f"{c.file.name}: {' -> '.join([c.head or NAS, *c.receivers])}" for c in self.chains]


def plan_fanout(
    needs: Mapping[str, Sequence[FanoutFile]],
    holders: Mapping[str, Sequence[str]] | None = None,
    fanout: bool = True,
) -> FanoutPlan:
    """The chains delivering `needs` ({node: files it lacks}, in node order); `holders` ({file: nodes with a
    verified copy}) may head a chain instead of the NAS. LabkitError when two nodes describe a file differently."""
    nodes, holders = tuple(needs), holders or {}
    files: dict[str, FanoutFile] = {}
    for node, wanted in needs.items():
        for f in wanted:
            if files.setdefault(f.name, f) != f:
                raise LabkitError(f"{node}: {f.name} differs from the other nodes' ({f} vs {files[f.name]})")
            if f.sha256 is not None and not _SHA256.fullmatch(f.sha256):
                raise LabkitError(f"{f.name}: expected sha256 {f.sha256!r} is not 64 lower-case hex digits")
    chains: list[Chain] = []
    nas_load = dict.fromkeys(nodes, 0)
    serve_load = dict.fromkeys(nodes, 0)
    for f in sorted(files.values(), key=lambda f: (-f.size, f.name)):
        receivers = [n for n in nodes if f in needs[n]]
        if not fanout:
            chains += [Chain(f, (n,)) for n in receivers]
            continue
        heads = [h for h in holders.get(f.name, ()) if h in serve_load and h not in receivers]
        head = min(heads, key=lambda n: (serve_load[n], nodes.index(n))) if heads else None
        if head is None:
            first = min(receivers, key=lambda n: (nas_load[n], nodes.index(n)))
            nas_load[first] += f.size
        else:
            first = min(receivers, key=lambda n: (serve_load[n], nodes.index(n)))
        i = receivers.index(first)
        chain = Chain(f, tuple(receivers[i:] + receivers[:i]), head)
        for n in serve_load:
            serve_load[n] += f.size * chain.pulls_from(n)
        chains.append(chain)
    return FanoutPlan(nodes, tuple(chains))


def needs_from(assessed: Sequence) -> tuple[dict[str, list[FanoutFile]], dict[str, list[str]]]:
    """From one view's `NodeAssessment`s (their node, to_copy and files): ({node: files to copy}, {file: nodes
    holding a verified or adopted copy}), the arguments of `plan_fanout`. A holder's copy is checked by every
    receiver (sha256) before use; a to_copy entry's "sha256", else the file's blob name when it is a SHA-256, is
    the digest."""
    needs = {
        a.node: [FanoutFile(c["name"], c["size"], c["src"], _digest(a, c)) for c in a.to_copy]
        for a in assessed
    }
    holders: dict[str, list[str]] = {}
    for a in assessed:
        copying = {c["name"] for c in a.to_copy}
        for name, f in a.files.items():
            if name not in copying and f.status in ("verified", "adopted"):
                holders.setdefault(name, []).append(a.node)
    return needs, holders


def _digest(a, item: dict) -> str | None:
    """The SHA-256 a copy must have: the to_copy entry's "sha256", else the file's blob name when it is one."""
    f = getattr(a, "files", {}).get(item["name"])
    blob = getattr(f, "blob", None)
    return item.get("sha256") or (blob if isinstance(blob, str) and _SHA256.fullmatch(blob) else None)


def partial_name(name: str, run: str) -> str:
    """The temp name of `name` in the view during fan-out run `run` (a partial copy to the probe)."""
    return f"{PARTIAL_PREFIX}{name}.{run}"


def serve_request(
    plan: FanoutPlan, node: str, dst: str, *, run: str, token: str, bind: str, lifetime: float,
    idle: float, stall: float, rate: float | None = None, flip: Mapping[str, int] | None = None,
) -> dict | None:  # fmt: skip
    """The `serve` request of `node` (None when it serves nothing): its own copies, growing or whole."""
    files, expect = [], plan.serving(node)
    for c in plan.chains:
        if not c.pulls_from(node):
            continue
        name = c.file.name
        if c.head == node:
            files.append({"name": name, "size": c.file.size, "path": f"{dst}/{name}"})
        else:
            path = f"{dst}/{partial_name(name, run)}"
            files.append({"name": name, "size": c.file.size, "path": path, "final": f"{dst}/{name}"})
    if not files:
        return None
    request = {"token": token, "bind": bind, "files": files, "expect": expect, "lifetime": lifetime}
    request.update(idle=idle, stall=stall, rate=rate or 0, flip=dict(flip or {}))
    return request


def nas_source(f: FanoutFile, nas: Mapping[str, object] | None = None) -> dict:
    """A read of `f` from the shared cache: its snapshot entry, or through `nas` ({"address", "port",
    "token"}: an HTTP stand-in for the NAS, as the benchmark and tests use to throttle and count reads)."""
    if nas:
        return {"kind": "peer", "label": NAS, **nas}
    return {"kind": "file", "label": NAS, "path": f.src}


def pull_request(
    plan: FanoutPlan, node: str, dst: str, *, run: str, token: str,
    endpoints: Mapping[str, tuple[str, int]], stall: float, nas: Mapping[str, object] | None = None,
) -> dict | None:  # fmt: skip
    """The `pull` request of `node` (None when it receives nothing). Peers absent from `endpoints` (their
    server did not start) are left out of the sources."""
    files = []
    for c in plan.receiving(node):
        sources = []
        for s in c.sources(node):
            if s is None:
                sources.append(nas_source(c.file, nas))
            elif s in endpoints:
                sources.append(
                    {"kind": "peer", "label": s, "address": endpoints[s][0], "port": endpoints[s][1]}
                )
        entry = {"name": c.file.name, "size": c.file.size, "partial": partial_name(c.file.name, run)}
        files.append({**entry, "sha256": c.file.sha256, "blob": c.file.src, "sources": sources})
    if not files:
        return None
    return {"dst": dst, "token": token, "stall": stall, "files": files}
