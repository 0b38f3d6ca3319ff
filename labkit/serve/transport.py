"""Which transport a node's collectives really used, read from its boot log: NCCL's INIT/NET debug lines
(`NET/IB : Using ...`, `NET/Socket : Using ...`, `Using network ...`, a missing libibverbs) and, on vLLM's CPU
lanes, the `backend=gloo` line of its parallel-state setup. Pure: text in, a Transport out; the boot watch
feeds every node's lines (labkit.serve.engines.BootLog) and the run gets `socket-fallback` when a lane with
RoCE HCAs used sockets. Line shapes and where they come from: docs/engines.md, "NCCL transport lines".
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

KINDS = ("ib", "socket", "gloo", "unknown")
NCCL_INFO = re.compile(r"\bNCCL (?:INFO|WARN)\s+(.*)$")
NET_USING = re.compile(r"^NET/(IB|Socket)\s*:\s*Using\s+(.*)$")
NETWORK = re.compile(r"^Using network\s+(\S+)")
NO_VERBS = re.compile(r"Failed to open libibverbs")
DEVICE = re.compile(r"\[\d+\]([^\s:/\[\];]+)")
GLOO = re.compile(r"\[parallel_state\.py:\d+\].*\bbackend=gloo\b")
NET_KIND = {"ib": "ib", "socket": "socket"}  # `Using network <name>` and NET/<name>, lower-cased


@dataclass(frozen=True)
class Transport:
    """One node's transport: `kind` "ib" (NCCL over IB verbs, RoCE included), "socket" (NCCL over TCP),
    "gloo" (vLLM CPU's torch.distributed backend) or "unknown" (no line said); `devices` the HCAs or
    interfaces NCCL listed for that transport; `line` the line the kind was read from;
    `libibverbs_missing` when NCCL could not load the verbs library (the usual cause of a socket fallback)."""

    kind: str = "unknown"
    devices: tuple[str, ...] = ()
    line: str = ""
    libibverbs_missing: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["devices"] = list(self.devices)
        return d


def net_devices(listing: str) -> tuple[str, ...]:
    """The device names of a `NET/<x> : Using` listing ("[0]rocep1s0f1:1/RoCE [1]... [RO]; OOB eth0:..." ->
    ("rocep1s0f1", ...)): port, link layer and address dropped, the out-of-band part after ";" ignored."""
    return tuple(DEVICE.findall(listing.split(";", 1)[0]))


class TransportReader:
    """Reads one node's log line by line; `transport()` says what it has seen so far. A `Using network` line
    decides the kind (NCCL prints it once the network is chosen; sockets win when communicators disagree, as
    that is what the flag looks for); without one, a `NET/Socket : Using` line means sockets and a
    `NET/IB : Using` line alone IB (NCCL tries IB first)."""

    def __init__(self) -> None:
        self.chosen: list[tuple[str, str]] = []  # (kind, line) of each `Using network` line
        self.listed: dict[str, tuple[tuple[str, ...], str]] = {}  # kind -> (devices, line), first of each
        self.gloo = ""
        self.verbs_missing = False

    def feed(self, line: str) -> None:
        if GLOO.search(line):
            self.gloo = self.gloo or line
            return
        m = NCCL_INFO.search(line)
        if m is None:
            return
        body = m.group(1).strip()
        if NO_VERBS.search(body):
            self.verbs_missing = True
        elif net := NET_USING.match(body):
            kind = NET_KIND[net.group(1).lower()]
            self.listed.setdefault(kind, (net_devices(net.group(2)), line))
        elif used := NETWORK.match(body):
            self.chosen.append((NET_KIND.get(used.group(1).lower(), "unknown"), line))

    def feed_text(self, text: str) -> Transport:
        for line in text.splitlines():
            self.feed(line)
        return self.transport()

    def transport(self) -> Transport:
        kind, line = self._kind()
        devices, listed_line = self.listed.get(kind, ((), ""))
        return Transport(kind, devices, listed_line or line, self.verbs_missing)

    def _kind(self) -> tuple[str, str]:
        for want in ("socket", "ib", "unknown"):
            hit = next((line for k, line in self.chosen if k == want), None)
            if hit is not None:
                return want, hit
        for want in ("socket", "ib"):
            if want in self.listed:
                return want, self.listed[want][1]
        if self.gloo:
            return "gloo", self.gloo
        return "unknown", ""

    @property
    def seen(self) -> bool:
        """Whether any transport line came by (a node without one gets no entry in the boot facts)."""
        return bool(self.chosen or self.listed or self.gloo or self.verbs_missing)


def read_transport(text: str) -> Transport:
    """The Transport one node's boot log states."""
    return TransportReader().feed_text(text)


def socket_fallback_flags(
    transport: Mapping[str, Mapping[str, Any]], hcas: Sequence[str]
) -> list[dict[str, str]]:
    """A `socket-fallback` run flag (window "boot") per node whose NCCL used sockets although the lane
    configured RoCE HCAs; none without HCAs (sockets are then the plan) or when the transport is unknown."""
    if not hcas:
        return []
    out = []
    for node, t in sorted(transport.items()):
        if t.get("kind") != "socket":
            continue
        cause = "; NCCL could not load libibverbs" if t.get("libibverbs_missing") else ""
        over = ", ".join(t.get("devices") or ()) or "TCP"
        message = (
            f"{node}: NCCL used sockets ({over}) although the lane configured the RoCE HCAs "
            f"{', '.join(hcas)}{cause}"
        )
        out.append({"code": "socket-fallback", "window": "boot", "message": message})
    return out
