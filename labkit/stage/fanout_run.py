"""Running a fan-out plan (labkit/stage/fanout.py) on the nodes (docs/fanout.md, "Running it"): a peer server
on every node that serves something, bound to its fabric address, then one pull per receiving node, all at
once; every server is stopped and this run's temp files are removed in a finally, whatever happened.

The servers run on a second connection to their node (`twin`), since the node's own one runs its pull. Every
command line carries the caller's `NodeJobs` mark, so an interrupted stage ends servers and pulls alike, and
the servers also carry a mark of their own, so the finally ends exactly them.
"""

from __future__ import annotations

import re
import secrets
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypedDict

from labkit.errors import LabkitError
from labkit.nodes import Host, NodeCalls, each_node
from labkit.recipe import LanePlan
from labkit.stage.fanout import NAS, FanoutPlan, partial_name, pull_request, serve_request
from labkit.stage.peer_ops import run_peer
from labkit.stage.transport import (
    DEFAULT_TIMEOUTS,
    STOP_TIMEOUT,
    EventSink,
    HostLike,
    NodeJobs,
    Timeouts,
)

SinkFor = Callable[[str], EventSink]  # node -> where its events go (CopyProgress.sink has this shape)
_INET = re.compile(r"\sinet\s+(\d{1,3}(?:\.\d{1,3}){3})/\d+")


@dataclass(frozen=True)
class PeerTimeouts:
    """Seconds for the peer ops; how long the whole ops may take comes from the stage's `Timeouts`."""

    stall: float = 60.0  # a source that sends nothing for this long is left for the receiver's next one
    idle: float = 120.0  # a server with no request for this long exits (its receivers have gone)
    listen: float = 60.0  # for every server to say it listens; one that does not is left out


def _twin(host: HostLike) -> Host | None:
    """A connection of its own to host's node (Host.twin), to be closed; None when host is its own twin."""
    twin = getattr(host, "twin", None)
    side = twin() if twin is not None else None
    return None if side is host else side


def _on_twin(host: HostLike, cmd: str, timeout: float):
    side = _twin(host)
    if side is None:
        return host.run(cmd, timeout=timeout)
    try:
        return side.run(cmd, timeout=timeout)
    finally:
        side.close()


def fabric_binds(plan: LanePlan, hosts: Iterable[HostLike], timeout: float = 30.0) -> dict[str, str]:
    """{node: the address its server binds}: the recipe's fabric address; else the first IPv4 address of the
    fabric interface, read on the node; else (no fabric declared) the address the node's name resolves to here."""
    fabric, out = plan.cluster.fabric, {}
    for h in hosts:
        if fabric is None:
            out[h.name] = socket.gethostbyname(h.name if h.name != "localhost" else "127.0.0.1")
        elif address := fabric.address(h.name):
            out[h.name] = address
        else:
            r = h.run(["ip", "-o", "-4", "addr", "show", "dev", fabric.interface], timeout=timeout)
            m = _INET.search(r.stdout) if r.exit_code == 0 else None
            if m is None:
                raise LabkitError(f"{h.name}: no IPv4 address on the fabric interface {fabric.interface}")
            out[h.name] = m.group(1)
    return out


class PeerServers:
    """The serve ops of one run, each in its own thread on its own connection, and their stop."""

    def __init__(
        self,
        hosts: Mapping[str, HostLike],
        requests: Mapping[str, dict],
        marks: Iterable[str],
        timeout: float,
        sink: SinkFor,
    ):
        self.hosts, self.requests, self.marks, self.timeout, self.sink = hosts, requests, marks, timeout, sink
        self.endpoints: dict[str, tuple[str, int]] = {}
        self.pids: dict[str, int | None] = {}
        self.results: dict[str, dict] = {}  # node -> the server's result, or {"error": why}, once it ended
        self.ready = {n: threading.Event() for n in requests}
        self.calls: NodeCalls | None = None

    def _serve(self, host: HostLike) -> None:
        def on_event(ev: dict) -> None:
            if ev.get("event") == "listening":
                self.endpoints[host.name] = (ev["address"], int(ev["port"]))
                self.pids[host.name] = ev.get("pid")
                self.ready[host.name].set()
            self.sink(host.name)({**ev, "role": "server"})

        side = _twin(host)
        try:
            req = self.requests[host.name]
            self.results[host.name] = run_peer(
                host if side is None else side,
                "serve",
                req,
                marks=self.marks,
                timeout=self.timeout,
                on_event=on_event,
            )
        except Exception as e:  # a server that fails is one source less, not a failed stage
            self.results[host.name] = {"error": str(e)}
        finally:
            self.ready[host.name].set()
            if side is not None:
                side.close()

    def start(self, wait: float) -> dict[str, tuple[str, int]]:
        """Start every server; {node: (address, port)} of those listening within `wait` s."""
        self.calls = NodeCalls(self._serve, [self.hosts[n] for n in self.requests])
        deadline = time.monotonic() + wait
        for ev in self.ready.values():
            ev.wait(max(0.0, deadline - time.monotonic()))
        return dict(self.endpoints)

    def stop(self, own: NodeJobs, cleanup: Mapping[str, list[str]], grace: float = 3.0) -> list[str]:
        """End the servers still running after `grace` s (a server whose last pull just ended is on its way
        out) by their own mark, and remove the `cleanup` paths; warnings."""
        if self.calls is not None:
            self.calls.wait(grace)
        pending = set(self.calls.pending()) if self.calls is not None else set()

        def one(h: HostLike) -> None:
            if h.name in pending:
                own.stop(h)
            if cleanup.get(h.name):
                _on_twin(h, shlex.join(["rm", "-f", "--", *cleanup[h.name]]), STOP_TIMEOUT)

        stops = NodeCalls(one, [h for n, h in self.hosts.items() if n in pending or cleanup.get(n)])
        warnings = []
        if stops.wait(STOP_TIMEOUT + 10):
            warnings += [f"{n}: fan-out cleanup: {e}" for n, (_, e) in stops.outcomes().items() if e]
        else:
            warnings += [f"{n}: the fan-out cleanup did not finish" for n in stops.pending()]
        if self.calls is not None and not self.calls.wait(10):
            warnings += [f"{n}: a fan-out server did not end" for n in self.calls.pending()]
        return warnings


@dataclass(frozen=True)
class Fetched:
    """One file on one node: where its bytes came from, how fast, how it was verified, what failed first."""

    node: str
    name: str
    bytes: int
    seconds: float
    source: str
    sha256: str
    verified: str
    tried: tuple[str, ...] = ()

    @property
    def mb_per_s(self) -> float | None:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else None


@dataclass
class FanoutReport:
    """What one fan-out did: every file on every node, each server's result, warnings, wall time."""

    plan: FanoutPlan
    files: list[Fetched]
    servers: dict[str, dict]
    warnings: list[str]
    seconds: float

    def nas_reads(self) -> dict[str, list[str]]:
        """{file: nodes that read it from the NAS}, counting reads that failed part way."""
        out: dict[str, list[str]] = {}
        for f in self.files:
            if f.source == NAS or any(t.startswith(NAS + ":") for t in f.tried):
                out.setdefault(f.name, []).append(f.node)
        return out

    def table(self) -> str:
        from tabulate import tabulate

        rows = [
            [f.node, f.name, f.source, f"{f.mb_per_s:.0f}" if f.mb_per_s else "-", f.verified, len(f.tried)]
            for f in self.files
        ]
        heads = ["node", "file", "from", "MB/s", "verified", "fallbacks"]
        notes = [f"  note: {w}" for w in self.warnings]
        notes += [f"  note: {f.node} {f.name}: {t}" for f in self.files for t in f.tried]
        return "\n".join([tabulate(rows, headers=heads), *notes, f"fan-out in {self.seconds:.1f} s"])


class RequestIds(TypedDict):
    """What every serve and pull request of one fan-out shares (serve_request's and pull_request's keywords)."""

    run: str
    token: str
    stall: float


def fan_out(
    hosts: Iterable[HostLike],
    plan: FanoutPlan,
    dst: str,
    *,
    binds: Mapping[str, str],
    on_event: SinkFor | None = None,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    peer: PeerTimeouts = PeerTimeouts(),  # noqa: B008 (frozen)
    jobs: NodeJobs | None = None,
    nas: Mapping[str, object] | None = None,
    serve_rate: float | None = None,
    flip: Mapping[str, Mapping[str, int]] | None = None,
) -> FanoutReport:
    """Deliver `plan` into `dst` on `hosts`: servers first, then every pull at once; see the module doc.

    `binds`: {node: address its server binds} (`fabric_binds`). `on_event(node)` takes that node's events
    (progress with source and rate, fallbacks; a server's carry role "server"). `nas`: an HTTP stand-in for
    the shared cache (tests, benchmark). `serve_rate` caps each server (bytes/s, tests); `flip`: {node:
    {file: offset}} the test-only fault of that node's server. Raises NodeError naming each node whose pull
    failed (a receiver whose every source failed); the servers are stopped either way."""
    t0, by_name = time.monotonic(), {h.name: h for h in hosts}
    if missing := [n for n in plan.nodes if n not in by_name or n not in binds]:
        raise LabkitError(f"fan-out: no host or no bind address for {', '.join(missing)}")
    jobs, own = jobs or NodeJobs(), NodeJobs()
    if jobs.stopped.is_set():
        raise LabkitError(f"fan-out into {dst} not started: staging was interrupted")
    run, token, sink = secrets.token_hex(4), secrets.token_hex(16), on_event or (lambda node: _ignore)
    lifetime = timeouts.for_bytes(plan.total_bytes)
    common: RequestIds = {"run": run, "token": token, "stall": peer.stall}
    requests = {
        n: r
        for n in plan.nodes
        if (
            r := serve_request(
                plan,
                n,
                dst,
                bind=binds[n],
                lifetime=lifetime,
                idle=peer.idle,
                rate=serve_rate,
                flip=(flip or {}).get(n),
                **common,
            )
        )  # fmt: skip
    }
    servers = PeerServers(by_name, requests, (jobs.mark, own.mark), lifetime + 30, sink)
    warnings: list[str] = []
    try:
        endpoints = servers.start(peer.listen)
        for n in sorted(set(requests) - set(endpoints)):
            why = servers.results.get(n, {}).get("error", f"not listening after {peer.listen:g} s")
            warnings.append(f"{n}: its fan-out server did not start ({why}); its receivers use other sources")
        pulls = {
            n: r
            for n in plan.nodes
            if (r := pull_request(plan, n, dst, endpoints=endpoints, nas=nas, **common))
        }

        def one(h: HostLike) -> list[dict]:
            timeout = timeouts.for_bytes(plan.bytes_for(h.name))
            got = run_peer(
                h, "pull", pulls[h.name], marks=(jobs.mark,), timeout=timeout, on_event=sink(h.name)
            )
            if got["errors"]:
                raise LabkitError("; ".join(got["errors"]))
            return got["files"]

        done = each_node(
            [by_name[n] for n in pulls], one, f"fan-out into {dst}", jobs.stop, f"the fan-out into {dst}"
        )
    finally:
        cleanup = {
            n: [f"{dst}/{partial_name(c.file.name, run)}" for c in plan.receiving(n)] for n in plan.nodes
        }
        warnings += servers.stop(own, cleanup, grace=0.0 if jobs.stopped.is_set() else 3.0)
    files = [Fetched(n, **{**f, "tried": tuple(f["tried"])}) for n, got in done.items() for f in got]
    return FanoutReport(plan, files, dict(servers.results), warnings, time.monotonic() - t0)


def _ignore(ev: dict) -> None:
    pass
