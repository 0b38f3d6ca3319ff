"""Fan-out on the four real sshd nodes (docs/test-nodes.md), each with its own tmpfs at the same path: one NAS
read per shard, a peer killed mid-transfer, a byte flipped on the wire, wrong tokens, and no server left."""

from __future__ import annotations

import hashlib
import http.client
import os
import threading
import time
from pathlib import Path

import pytest

from labkit.errors import LabkitError
from labkit.nodes.group import host_for
from labkit.stage.fanout import FanoutFile, plan_fanout
from labkit.stage.fanout_requests import partial_name
from labkit.stage.fanout_run import PeerServers, PeerTimeouts, fan_out, run_peer
from labkit.stage.transport import NodeJobs
from tests.support.hf_cache import LOCAL, default_files, make_cache, payload
from tests.support.nodes import ADDRESSES

BINDS = {a: a for a in ADDRESSES}  # the test nodes' own addresses stand in for their fabric addresses
QUICK = PeerTimeouts(stall=10, idle=10, listen=30)


class FifoNas:
    """The shared cache's blobs of `files` as FIFOs this process feeds: each open is one read of the NAS (a
    second read would block until this writer came round again, and be counted)."""

    def __init__(self, snap: Path, files: dict[str, bytes]):
        self.opens = dict.fromkeys(files, 0)
        self.paths, self.stopping, self.threads = {}, False, []
        for name, data in files.items():
            blob = (snap / name).resolve()
            blob.unlink()
            os.mkfifo(blob)
            self.paths[name] = blob
            self.threads.append(threading.Thread(target=self._feed, args=(name, blob, data), daemon=True))
            self.threads[-1].start()

    def _feed(self, name: str, path: Path, data: bytes) -> None:
        while True:
            try:
                with open(path, "wb") as f:  # blocks until a node opens the blob to read it
                    if self.stopping:
                        return
                    self.opens[name] += 1
                    f.write(data)
            except BrokenPipeError:
                pass
            self._reader_gone(path)

    @staticmethod
    def _reader_gone(path: Path) -> None:
        """Wait (at most 10 s) until the reader has closed the FIFO: it reads the file's size, not to EOF, and
        an open for writing while it still holds its end would not block, and count twice."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO: no reader has it open
            except OSError:
                return
            time.sleep(0.01)

    def close(self) -> None:
        self.stopping = True
        for path in self.paths.values():  # an open for reading lets a writer waiting in open() go on
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        for t in self.threads:
            t.join(5)


def wanted(snap: Path, files: dict[str, bytes], names=LOCAL) -> list[FanoutFile]:
    """The files as needs_from gives them: each with its blob name, the file's SHA-256."""
    return [
        FanoutFile(n, len(files[n]), f"{snap}/{n}", hashlib.sha256(files[n]).hexdigest(), "blob name")
        for n in names
    ]


def collect(events: list):
    return lambda node: lambda ev: events.append((node, ev))


def peers_left(group, jobs: NodeJobs) -> dict[str, str]:
    """{node: pids} of processes still carrying this run's mark (the pattern does not match pgrep's shell)."""
    pattern = f"labkit-stage-job=[{jobs.token[0]}]{jobs.token[1:]}"
    out = {}
    for h in group:
        r = h.run(["pgrep", "-f", pattern])
        if r.stdout.strip():
            out[h.name] = r.stdout.strip()
    return out


def assert_copies(group, dst: str, files: dict[str, bytes], names=LOCAL) -> None:
    """Every node holds each file under its final name with the right SHA-256, and no temp file."""
    for h in group:
        r = h.run(["sha256sum", "--", *[f"{dst}/{n}" for n in names]])
        assert r.exit_code == 0, (h.name, r.stderr)
        got = {line.split()[1].rsplit("/", 1)[1]: line.split()[0] for line in r.stdout.splitlines()}
        assert got == {n: hashlib.sha256(files[n]).hexdigest() for n in names}, h.name
        listing = h.run(["ls", "-A", dst]).stdout.split()
        assert not [n for n in listing if n.startswith(".labkit-partial.")], (h.name, listing)


def test_each_shard_is_read_from_the_nas_once_and_pipelined_to_every_node(nodes, tmp_path):
    group, dst = nodes
    files = default_files()
    snap = make_cache(tmp_path / "nas" / "hub", files)
    nas = FifoNas(snap, {n: files[n] for n in LOCAL})
    plan = plan_fanout({h.name: wanted(snap, files) for h in group})
    jobs, events = NodeJobs(), []
    try:
        report = fan_out(group, plan, dst, binds=BINDS, on_event=collect(events), jobs=jobs, peer=QUICK)
    finally:
        nas.close()
    assert nas.opens == {LOCAL[0]: 1, LOCAL[1]: 1}  # each blob opened once, in all
    assert plan.nas_reads() == {LOCAL[0]: [ADDRESSES[0]], LOCAL[1]: [ADDRESSES[1]]}  # by different nodes
    assert report.nas_reads() == plan.nas_reads()
    assert_copies(group, dst, files)
    for f in report.files:
        (chain,) = [c for c in plan.chains if c.file.name == f.name]
        assert f.source == (chain.sources(f.node)[0] or "nas") and not f.tried
        assert f.verified == "sha256 = blob name"
    # progress names each node's source and rate; every server ended because its pulls were done
    seen = {
        (n, ev["source"]) for n, ev in events if ev["event"] == "progress" and ev["done"] and ev["rate"] > 0
    }
    assert {(f.node, f.source) for f in report.files} <= seen
    assert {n: r["ended"] for n, r in report.servers.items()} == dict.fromkeys(report.servers, "done")
    listening = [ev for _, ev in events if ev["event"] == "listening"]
    assert sorted(ev["address"] for ev in listening) == list(ADDRESSES)  # each on its own address only
    assert peers_left(group, jobs) == {}


@pytest.mark.parametrize("hop", [0, 1], ids=["the-nas-reader", "a-middle-node"])
def test_a_peer_killed_mid_transfer_is_left_for_the_next_source(nodes, tmp_path, cluster, hop):
    """The server of the chain's node `hop` is killed (SIGKILL) while the next node pulls from it: that node
    resumes from its next source (the NAS for the reader's, else the node ahead) and every copy ends right."""
    group, dst = nodes
    files = {**default_files(), LOCAL[0]: payload(4_000_000, 7)}
    snap = make_cache(tmp_path / "nas" / "hub", files)
    plan = plan_fanout({h.name: wanted(snap, files) for h in group})
    chain = next(c for c in plan.chains if c.file.name == LOCAL[0])
    victim, watcher = chain.receivers[hop], chain.receivers[hop + 1]
    pids, hit, events = {}, threading.Event(), []

    def on_event(node):
        def sink(ev):
            events.append((node, ev))
            if ev["event"] == "listening":
                pids[node] = ev["pid"]
            mine = (node, ev["event"], ev.get("name"), ev.get("source")) == (
                watcher,
                "progress",
                LOCAL[0],
                victim,
            )
            if mine and ev["done"]:  # this file's bytes: another file from the same server may come first
                hit.set()

        return sink

    def killer():
        if hit.wait(60):
            h = host_for(victim, None, 22, 5, cluster.ssh_options())
            try:
                h.run(["kill", "-9", str(pids[victim])]).check("kill the server")
            finally:
                h.close()

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    jobs = NodeJobs()
    report = fan_out(group, plan, dst, binds=BINDS, on_event=on_event, jobs=jobs, peer=QUICK, serve_rate=1e6)
    t.join(5)
    assert hit.is_set()
    assert_copies(group, dst, files)
    (got,) = [f for f in report.files if f.node == watcher and f.name == LOCAL[0]]
    assert got.tried and got.tried[0].startswith(f"{victim}: ")
    assert got.source == ("nas" if hop == 0 else chain.receivers[0])
    resumed = [
        ev
        for n, ev in events
        if (n, ev["event"], ev.get("name"), ev.get("source")) == (watcher, "progress", LOCAL[0], got.source)
    ]
    assert resumed[0]["done"] > 0  # it went on from the byte reached (the digest is known: the blob name)
    assert "error" in report.servers[victim]
    assert len(report.nas_reads()[LOCAL[0]]) == (2 if hop == 0 else 1)
    assert peers_left(group, jobs) == {}


TOKEN = "k" * 32


def serve_one(host, dst: str, name: str, size: int, jobs: NodeJobs, allow, **extra) -> PeerServers:
    """A server on `host` offering its complete copy dst/name to `allow` (addresses; TOKEN is the receiver
    "r"'s), listening (the caller stops it)."""
    request = {
        "bind": host.name,
        "allow": list(allow),
        "files": [{"name": name, "size": size, "path": f"{dst}/{name}", "tokens": {TOKEN: "r"}}],
    }
    request.update({"expect": {name: 1}, "lifetime": 120, "idle": 10, "stall": 5, **extra})
    servers = PeerServers(
        {host.name: host}, {host.name: request}, (jobs.mark,), 150, lambda node: lambda ev: None
    )
    assert host.name in servers.start(30), servers.results
    return servers


def place(host, dst: str, src: str) -> None:
    host.run(["sh", "-c", 'mkdir -p "$1" && cp "$2" "$1/"', "sh", dst, src]).check("place a copy")


def test_a_byte_flipped_in_transit_is_caught_before_the_rename(nodes, tmp_path):
    group, dst = nodes
    files = default_files()
    snap = make_cache(tmp_path / "nas" / "hub", files)
    name, size = LOCAL[0], len(files[LOCAL[0]])
    a, b = group.hosts[0], group.hosts[1]
    place(a, dst, f"{snap}/{name}")
    jobs, events = NodeJobs(), []
    servers = serve_one(a, dst, name, size, jobs, [b.name], flip={name: 1_234_567})
    try:
        (address, port) = servers.endpoints[a.name]
        source = {"kind": "peer", "label": a.name, "address": address, "port": port, "token": TOKEN}
        entry = {
            "name": name,
            "size": size,
            "partial": partial_name(name, "0000aaaa"),
            "blob": f"{snap}/{name}",
        }
        request = {"dst": dst, "bind": b.name, "stall": 5, "files": [{**entry, "sources": [source]}]}
        got = run_peer(b, "pull", request, marks=(jobs.mark,), timeout=60, on_event=events.append)
    finally:
        servers.stop(NodeJobs(), {})
    assert got["files"] == [] and len(got["errors"]) == 1
    assert f"expected {hashlib.sha256(files[name]).hexdigest()}" in got["errors"][0]
    assert [ev["source"] for ev in events if ev["event"] == "fallback"] == [a.name]
    assert b.run(["ls", "-A", dst]).stdout.split() == []  # neither the file nor its temp copy
    assert servers.results[a.name]["served"] == {name: 1}
    # Through fan_out: the node after the faulty server falls back and every copy ends right.
    plan = plan_fanout({h.name: wanted(snap, files) for h in group})
    reader = plan.chains[0].receivers[0]
    report = fan_out(group, plan, dst, binds=BINDS, jobs=jobs, peer=QUICK, flip={reader: {name: 1_234_567}})
    assert_copies(group, dst, files)
    (second,) = [f for f in report.files if f.node == plan.chains[0].receivers[1] and f.name == name]
    assert "sha256" in second.tried[0] and second.source == "nas"
    assert peers_left(group, jobs) == {}


def test_a_server_refuses_wrong_tokens_and_other_paths(nodes, tmp_path):
    group, dst = nodes
    files = default_files()
    snap = make_cache(tmp_path / "nas" / "hub", files)
    name, size = LOCAL[1], len(files[LOCAL[1]])
    a, b = group.hosts[2], group.hosts[3]
    place(a, dst, f"{snap}/{name}")
    jobs = NodeJobs()
    servers = serve_one(a, dst, name, size, jobs, [b.name])
    address, port = servers.endpoints[a.name]
    try:
        asked = []
        for path, token in [
            (f"/f/{name}", None),
            (f"/f/{name}", "x" * 32),
            (f"/f/{name}", TOKEN[:-1]),
            ("/f/config.json", TOKEN),
            ("/f/..%2F..%2Fetc%2Fpasswd", TOKEN),
            (f"/digest/{name}", TOKEN),
        ]:  # from b's address, which the server allows
            conn = http.client.HTTPConnection(address, port, timeout=10, source_address=(b.name, 0))
            conn.request("GET", path, headers={"X-Labkit-Token": token} if token else {})
            asked.append(conn.getresponse().status)
            conn.close()
        assert asked == [403, 403, 403, 404, 404, 404]
        source = {"kind": "peer", "label": a.name, "address": address, "port": port, "token": TOKEN}
        entry = {
            "name": name,
            "size": size,
            "partial": partial_name(name, "0000bbbb"),
            "blob": f"{snap}/{name}",
        }
        request = {"dst": dst, "bind": b.name, "stall": 5, "files": [{**entry, "sources": [source]}]}
        got = run_peer(b, "pull", request, marks=(jobs.mark,), timeout=60)
    finally:
        servers.stop(NodeJobs(), {})
    assert got["errors"] == [] and got["files"][0]["source"] == a.name
    refused = {"no or wrong token": 3, "not a file this server offers": 3}
    assert servers.results[a.name] == {"served": {name: 1}, "refused": refused, "ended": "done"}
    assert peers_left(group, jobs) == {}


def test_a_server_whose_controller_went_away_ends_on_its_own(nodes, cluster):
    """The connection that started a server is dropped (labkit died): the server ends after `idle` s; one
    kept busy by a receiver that never gets its bytes ends at `lifetime` (SIGALRM)."""
    group, dst = nodes
    jobs = NodeJobs()
    a = host_for(ADDRESSES[0], None, 22, 5, cluster.ssh_options())
    request = {"bind": a.name, "allow": [ADDRESSES[1]], "expect": {"f": 1}, "stall": 600}
    starts = [
        ({**request, "lifetime": 600, "idle": 2}, False),
        ({**request, "lifetime": 3, "idle": 600}, True),
    ]
    for i, (req, hold) in enumerate(starts):
        req["files"] = [
            {
                "name": "f",
                "size": 10,
                "path": f"{dst}/.labkit-partial.f.0000000{i}",
                "final": f"{dst}/f",
                "tokens": {TOKEN: "r"},
            }
        ]
        servers = PeerServers({a.name: a}, {a.name: req}, (jobs.mark,), 700, lambda node: lambda ev: None)
        endpoint = servers.start(30).get(a.name)
        assert endpoint, servers.results
        if hold:  # a receiver waiting for bytes that never come: in flight, so never idle
            conn = http.client.HTTPConnection(*endpoint, timeout=60, source_address=(ADDRESSES[1], 0))
            conn.request("GET", "/f/f", headers={"X-Labkit-Token": TOKEN})
        else:
            a.close()  # the controller's connection is gone; the command on the node runs on
        assert servers.calls.wait(120)
        assert peers_left(group, jobs) == {}
        if hold:
            assert "exit 142" in servers.results[a.name]["error"]  # 128 + SIGALRM
            with pytest.raises((http.client.HTTPException, OSError)):
                conn.getresponse().read()
            conn.close()
    a.close()
    with pytest.raises(LabkitError, match="refusing to listen on every address"):
        run_peer(group.hosts[0], "serve", {**request, "bind": "0.0.0.0", "lifetime": 30}, timeout=60)
