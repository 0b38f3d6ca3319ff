"""Running a fan-out plan (labkit/stage/fanout.py) on the nodes (docs/fanout.md, "Running it"): a peer server
on every node that serves something, bound to its fabric address, then one pull per receiving node, all at
once; every server is stopped and this run's temp files are removed in a finally, whatever happened. Files
without a SHA-256 take a second round, checked against their first receiver's NAS read (docs/fanout.md,
"Trust"); at the end every file's copies must have one SHA-256 on every node.

The servers run on a second connection to their node (`twin`), since the node's own one runs its pull. Every
command line carries the caller's `NodeJobs` mark, so an interrupted stage ends servers and pulls alike, and
the servers also carry a mark of their own, so the finally ends exactly them.
"""

from __future__ import annotations

import secrets
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from labkit.errors import LabkitError
from labkit.nodes import Host, NodeCalls, all_addresses, each_node, no_address, routable
from labkit.recipe import LanePlan
from labkit.stage.fanout import NAS, FanoutPlan
from labkit.stage.fanout_report import FanoutReport, Fetched, add_refusals
from labkit.stage.fanout_requests import partial_name, pull_request, serve_request, token_keys
from labkit.stage.node.peer_temp import RUN_TAG_LEN
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


@dataclass(frozen=True)
class PeerTimeouts:
    """Seconds for the peer ops; how long the whole ops may take comes from the stage's `Timeouts`."""

    stall: float = 60.0  # a source that sends nothing for this long is left for the receiver's next one
    idle: float = 120.0  # a server with no request with a token for this long exits (its receivers have gone)
    listen: float = 60.0  # for every server to say it listens; one that does not is left out
    floor: float = 1e6  # bytes/s a source (but the last) must keep up over each `window`, else it is left
    window: float = 60.0
    head: float = 10.0  # for a request head to arrive at a server, else the connection is cut


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
    """{node: the address its server binds}: the recipe's fabric address; else the first routable IPv4 address
    of the fabric interface, read on the node (link-local ones skipped, as the serve step skips them); else (no
    fabric declared) the address the node's name resolves to here."""
    fabric, out = plan.cluster.fabric, {}
    for h in hosts:
        if fabric is None:
            out[h.name] = socket.gethostbyname(h.name if h.name != "localhost" else "127.0.0.1")
        elif address := fabric.address(h.name):
            out[h.name] = address
        else:
            interface = fabric.interface_of(h.name)  # its own port where the recipe names one
            r = h.run(["ip", "-o", "-4", "addr", "show", "dev", interface], timeout=timeout)
            found = all_addresses(r.stdout) if r.exit_code == 0 else []
            usable = routable(found)
            if not usable:
                why = no_address(found)
                raise LabkitError(f"{h.name}: no address to bind on the fabric interface {interface}: {why}")
            out[h.name] = usable[0]
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
        self.results: dict[str, dict] = {}  # node -> the server's result, or {"error": why}, once it ended
        self.ready = {n: threading.Event() for n in requests}
        self.calls: NodeCalls | None = None

    def _serve(self, host: HostLike) -> None:
        def on_event(ev: dict) -> None:
            if ev.get("event") == "listening":
                self.endpoints[host.name] = (ev["address"], int(ev["port"]))
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


__all__ = ["FanoutReport", "Fetched", "PeerServers", "PeerTimeouts", "fabric_binds", "fan_out", "run_peer"]


@dataclass
class _Round:
    """One round of a fan-out: what every request of it shares, and how it runs."""

    by_name: dict[str, HostLike]
    dst: str
    binds: Mapping[str, str]
    sink: SinkFor
    timeouts: Timeouts
    peer: PeerTimeouts
    jobs: NodeJobs
    nas: Mapping[str, object] | None
    serve_rate: float | None
    flip: Mapping[str, Mapping[str, int]]

    def sink_for(self, warnings: list[str]) -> SinkFor:
        """The caller's sink, and a warning per crashed run's temp file a node removed or adopted."""

        def one(node: str) -> EventSink:
            inner = self.sink(node)

            def on_event(ev: dict) -> None:
                if ev.get("event") == "leftover":
                    warnings.append(
                        f"{node}: {ev.get('path')} ({ev.get('action')}), left by an interrupted fan-out"
                    )
                inner(ev)

            return on_event

        return one

    def run(self, plan: FanoutPlan, warnings: list[str]) -> tuple[list[Fetched], dict[str, dict]]:
        """Servers, then every pull at once; the servers are stopped and the temp files removed either way."""
        run, own, dst, peer, sink = (
            secrets.token_hex(RUN_TAG_LEN // 2),  # the run's id, as the nodes recognise it in temp names
            NodeJobs(),
            self.dst,
            self.peer,
            self.sink_for(warnings),
        )
        tokens = {key: secrets.token_hex(16) for key in token_keys(plan)}
        lifetime = self.timeouts.for_bytes(plan.total_bytes)
        requests = {}
        for n in plan.nodes:
            r = serve_request(
                plan, n, dst, run=run, tokens=tokens, bind=self.binds[n], binds=self.binds, lifetime=lifetime,
                idle=peer.idle, stall=peer.stall, head=peer.head, rate=self.serve_rate, flip=self.flip.get(n),
            )  # fmt: skip
            if r is not None:
                requests[n] = r
        servers = PeerServers(self.by_name, requests, (self.jobs.mark, own.mark), lifetime + 30, sink)
        done: dict[str, list[dict]] = {}
        try:
            endpoints = servers.start(peer.listen)
            for n in sorted(set(requests) - set(endpoints)):
                why = servers.results.get(n, {}).get("error", f"not listening after {peer.listen:g} s")
                warnings.append(
                    f"{n}: its fan-out server did not start ({why}); its receivers use other sources"
                )
            pulls = {}
            for n in plan.nodes:
                r = pull_request(
                    plan, n, dst, run=run, tokens=tokens, bind=self.binds[n], endpoints=endpoints,
                    stall=peer.stall, floor=peer.floor, window=peer.window, nas=self.nas,
                )  # fmt: skip
                if r is not None:
                    pulls[n] = r

            def one(h: HostLike) -> list[dict]:
                timeout = self.timeouts.for_bytes(plan.bytes_for(h.name))
                marks = (self.jobs.mark,)
                got = run_peer(h, "pull", pulls[h.name], marks=marks, timeout=timeout, on_event=sink(h.name))
                if got["errors"]:
                    raise LabkitError("; ".join(got["errors"]))
                return got["files"]

            hosts = [self.by_name[n] for n in pulls]
            done = each_node(hosts, one, f"fan-out into {dst}", self.jobs.stop, f"the fan-out into {dst}")
        finally:
            cleanup = {
                n: [f"{dst}/{partial_name(c.file.name, run)}" for c in plan.receiving(n)] for n in plan.nodes
            }
            warnings += servers.stop(own, cleanup, grace=0.0 if self.jobs.stopped.is_set() else 3.0)
        files = [Fetched(n, **{**f, "tried": tuple(f["tried"])}) for n, got in done.items() for f in got]
        return files, dict(servers.results)


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

    `binds`: {node: address its server binds and its pulls connect from} (`fabric_binds`). `on_event(node)`
    takes that node's events (progress with source and rate, fallbacks; a server's carry role "server").
    `nas`: an HTTP stand-in for the shared cache (tests, benchmark). `serve_rate` caps each server (bytes/s,
    tests); `flip`: {node: {file: offset}} the test-only fault of that node's server. Raises NodeError naming
    each node whose pull failed (a receiver whose every source failed), and LabkitError when a file's copies
    differ between nodes; the servers are stopped either way."""
    t0, by_name = time.monotonic(), {h.name: h for h in hosts}
    if missing := [n for n in plan.nodes if n not in by_name or n not in binds]:
        raise LabkitError(f"fan-out: no host or no bind address for {', '.join(missing)}")
    jobs = jobs or NodeJobs()
    if jobs.stopped.is_set():
        raise LabkitError(f"fan-out into {dst} not started: staging was interrupted")
    sink = on_event or (lambda node: _ignore)
    rounds = _Round(by_name, dst, binds, sink, timeouts, peer, jobs, nas, serve_rate, flip or {})
    warnings: list[str] = []
    refused: dict[str, dict[str, int]] = {}
    files, servers = rounds.run(plan.first_round(), warnings)
    add_refusals(refused, servers)
    read = {f.name: (f.node, f.sha256) for f in files if f.source == NAS}
    if (second := plan.second_round(read)).chains:
        more, later = rounds.run(second, warnings)
        add_refusals(refused, later)
        files, servers = files + more, {**servers, **later}
    report = FanoutReport(plan, files, servers, warnings, time.monotonic() - t0, plan.trust(), refused)
    _agree(report, by_name, dst)
    return report


def _agree(report: FanoutReport, hosts: Mapping[str, HostLike], dst: str) -> None:
    """Every file's copies have one SHA-256 on every node, the expected one when it is known; else the
    copies of that file are removed and LabkitError names the nodes and the hashes (with no digest to go
    by, the NAS file changed between two nodes' reads of it)."""
    expected = {c.file.name: c.file.sha256 for c in report.plan.chains}
    by_file: dict[str, dict[str, str]] = {}
    for f in report.files:
        by_file.setdefault(f.name, {})[f.node] = f.sha256
    bad = {
        name: got
        for name, got in by_file.items()
        if len(set(got.values())) > 1 or (expected.get(name) and set(got.values()) != {expected[name]})
    }
    if not bad:
        return
    for name, got in bad.items():
        for node in got:
            _on_twin(hosts[node], shlex.join(["rm", "-f", "--", f"{dst}/{name}"]), STOP_TIMEOUT)
    raise LabkitError(
        "fan-out: copies differ between nodes, removed: "
        + "; ".join(
            f"{name}: " + ", ".join(f"{n} sha256 {h}" for n, h in got.items()) for name, got in bad.items()
        )
    )


def _ignore(ev: dict) -> None:
    pass
