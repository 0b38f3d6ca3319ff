"""Fan-out planning (pure, no I/O): which node reads each hot shard from the shared cache, who pulls it from
whom over the fabric, and where each receiver turns when its source fails (docs/fanout.md, "The plan").

Every file goes down one chain: its head (a node already holding a verified copy, or the NAS) feeds the
first receiver, and each receiver feeds the next while it is still receiving (labkit/stage/node/peer.py
serves the bytes a node has written). So each shard is read from the NAS once, by the receiver with the
fewest NAS bytes so far (the reads spread over the nodes, largest file first), and every node sends and
receives each file at most once. A receiver's fallbacks are the nodes ahead of it in the chain, nearest
first, then the NAS. `fanout=False` gives every receiver its own read of the NAS (the independent copies).
A file whose SHA-256 is known (its blob name, or given) is checked by every receiver against it; a file
without one is read from the NAS by its first receiver alone, and the others get it in a second round, checked
against the SHA-256 of that read, which reaches them from the controller, never from a peer
(`FanoutPlan.first_round`, `second_round`; docs/fanout.md, "Trust"). The node ops' requests are built in
`fanout_requests`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from labkit.errors import LabkitError

NAS = "nas"  # the label of a read from the shared cache in requests, events and reports
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class FanoutFile:
    """One file to deliver: its name in the view, size, snapshot entry in the shared cache (what a NAS read
    opens), expected SHA-256 and where that came from ("blob name", "given", "<node>'s NAS read"). Without a
    SHA-256 the file is not passed node to node until one node's read of the NAS gave one."""

    name: str
    size: int
    src: str
    sha256: str | None = None
    digest_from: str = "given"

    @property
    def trust(self) -> str | None:
        """What its receivers check it against, in words; None without a SHA-256."""
        if self.sha256 is None:
            return None
        return "sha256 = blob name" if self.digest_from == "blob name" else f"sha256 {self.digest_from}"


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

    def first_round(self) -> FanoutPlan:
        """The chains that can run at once: every file with a SHA-256 whole, every other one to its first
        receiver only (a read of the NAS)."""
        chains = tuple(c if c.file.sha256 else Chain(c.file, c.receivers[:1]) for c in self.chains)
        return FanoutPlan(self.nodes, chains)

    def second_round(self, read: Mapping[str, tuple[str, str]]) -> FanoutPlan:
        """The rest of each file without a SHA-256, once `read` ({file: (node, sha256 of its NAS read)}) has
        its first receiver's: headed by that node, every other receiver checked against that SHA-256. A file
        whose first read failed is not in it."""
        chains = []
        for c in self.chains:
            if c.file.sha256 is None and len(c.receivers) > 1 and c.file.name in read:
                node, sha = read[c.file.name]
                f = replace(c.file, sha256=sha, digest_from=f"of {node}'s NAS read")
                chains.append(Chain(f, c.receivers[1:], node))
        return FanoutPlan(self.nodes, tuple(chains))

    def trust(self) -> dict[str, str]:
        """{file: what its copies were checked against}, for the staging record (docs/fanout.md, "Trust")."""
        out: dict[str, str] = {}
        for c in self.chains:
            if c.file.trust:
                out[c.file.name] = f"{c.file.trust}, checked by every receiver"
            elif len(c.receivers) > 1:
                out[c.file.name] = (
                    f"no blob digest: sha256 of {c.receivers[0]}'s NAS read, given to the other receivers "
                    "by the controller"
                )
            elif c.file.name not in out:
                out[c.file.name] = "no digest: not passed peer to peer (read from the NAS by each receiver)"
        return out


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
        heads = [h for h in holders.get(f.name, ()) if h in serve_load and h not in receivers and f.sha256]
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
    needs = {a.node: [_wanted(a, c) for c in a.to_copy] for a in assessed}
    holders: dict[str, list[str]] = {}
    for a in assessed:
        copying = {c["name"] for c in a.to_copy}
        for name, f in a.files.items():
            if name not in copying and f.status in ("verified", "adopted"):
                holders.setdefault(name, []).append(a.node)
    return needs, holders


def _wanted(a, item: dict) -> FanoutFile:
    """The file to copy with the SHA-256 it must have: the to_copy entry's "sha256", else the file's blob name
    when it is one."""
    f = getattr(a, "files", {}).get(item["name"])
    blob = getattr(f, "blob", None)
    if item.get("sha256"):
        return FanoutFile(item["name"], item["size"], item["src"], item["sha256"])
    if isinstance(blob, str) and _SHA256.fullmatch(blob):
        return FanoutFile(item["name"], item["size"], item["src"], blob, "blob name")
    return FanoutFile(item["name"], item["size"], item["src"])
