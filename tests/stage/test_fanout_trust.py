"""The fan-out's root of trust (issue 25, item 1; docs/fanout.md, "Trust"), with the node script run on loopback
addresses (tests/support/peer_loopback.py) and on the four sshd nodes: no peer can vouch for the bytes it sends,
a NAS file that changes while it is read is refused, and a file without a blob digest goes on checked against
one node's NAS read, which the controller hands on.
"""

from __future__ import annotations

import hashlib
import os

import pytest

from labkit.stage.fanout import FanoutFile, plan_fanout
from labkit.stage.fanout_requests import partial_name
from labkit.stage.fanout_run import fan_out
from labkit.stage.transport import NodeJobs
from tests.stage.test_fanout_ssh import BINDS, QUICK, FifoNas, assert_copies, collect, peers_left
from tests.support.hf_cache import LOCAL, default_files, make_cache, payload
from tests.support.peer_loopback import A, B, C, FakePeer, ask, head, pulling, serving

TOKEN = "t" * 32  # B's token at A (also the run-wide token an older peer script reads)
SIZE = 1_000_000


def nas_file(tmp_path, data: bytes, name: str = "w.bin"):
    """A file on the "NAS" that is no link into blobs/ (a hand-made cache): no digest to be had."""
    path = tmp_path / "nas" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def entry(name: str, size: int, src, sources: list, sha256: str | None = None) -> dict:
    e = {"name": name, "size": size, "partial": partial_name(name, "0123abcd"), "blob": str(src)}
    return {**e, "sha256": sha256, "sources": sources}


def pull_req(dst, *files, **extra) -> dict:
    return {"dst": str(dst), "bind": B, "token": TOKEN, "stall": 10, "files": list(files), **extra}


def offer(path, name: str, size: int, tokens: dict, **extra) -> dict:
    files = [{"name": name, "size": size, "path": str(path), "tokens": tokens}]
    request = {"bind": A, "allow": [B], "token": TOKEN, "files": files, "expect": {name: 1}}
    return {**request, "lifetime": 60, "idle": 30, "stall": 10, **extra}


def forged_reply(forged: bytes):
    """What an impostor sends: forged bytes, and after them their SHA-256 when asked for a peer's digest (as
    an older peer script did, and trusted)."""

    def reply(request_head: bytes):
        if b"X-Labkit-Verify: digest" in request_head:
            trailer = hashlib.sha256(forged).hexdigest().encode()
            yield head("200 OK", len(forged), len(forged) + 64) + forged + trailer
        else:
            yield head("200 OK", len(forged), len(forged)) + forged

    return reply


def test_an_impostor_on_a_freed_port_gets_no_forged_bytes_into_place(tmp_path):
    """A's server ends and an impostor binds its port: a file without a digest is not taken from any peer at
    all; with the digest the controller gives, the forgery is caught and the NAS copy goes in; and the token
    the impostor was sent opens nothing at another server (tokens are per source, receiver and file)."""
    data, forged = payload(SIZE, 1), payload(SIZE, 2)
    src = nas_file(tmp_path, data)
    real, endpoint = serving(offer(src, "w.bin", SIZE, {TOKEN: "B"}, idle=0.5))
    real.finish(30)  # idle: ends, and its port is free
    impostor = FakePeer(endpoint[0], forged_reply(forged), port=endpoint[1])
    try:
        dst = tmp_path / "b-view"
        peer = {"kind": "peer", "label": "A", "address": endpoint[0], "port": endpoint[1], "token": TOKEN}
        nas = {"kind": "file", "label": "nas", "path": str(src)}
        got, error, _ = pulling(pull_req(dst, entry("w.bin", SIZE, src, [peer, nas])))
        assert error is None and got["files"] == [], (got, error)
        assert "no digest known" in got["errors"][0] and "NAS only" in got["errors"][0], got
        assert not (dst / "w.bin").exists() and impostor.heads == []  # never asked, so never given a token
        sha = hashlib.sha256(data).hexdigest()
        got, error, _ = pulling(pull_req(dst, entry("w.bin", SIZE, src, [peer, nas], sha256=sha)))
        assert error is None and got["errors"] == [], (got, error)
        (f,) = got["files"]
        assert f["source"] == "nas" and f["tried"][0].startswith("A: ") and "expected " + sha in f["tried"][0]
        assert (dst / "w.bin").read_bytes() == data
    finally:
        impostor.close()
    # The impostor kept B's token for A; C's server offers the same file, with B's token for C.
    other, at_c = serving({**offer(src, "w.bin", SIZE, {"c" * 32: "B"}), "bind": C})
    try:
        assert ask(at_c, B, "/f/w.bin", impostor.token_sent()) == 403
        assert ask(at_c, B, "/f/w.bin", "c" * 32) == 200
    finally:
        other.stop()


def test_a_nas_file_changed_during_the_read_is_not_accepted(tmp_path):
    """No digest: the read of the NAS is all there is, so a file whose mtime/ctime/size moved while it was
    read is refused, not accepted on its size (reads capped at 1 MB/s, the change made after the first MB)."""
    data = payload(4_000_000, 3)
    src = nas_file(tmp_path, data)
    dst = tmp_path / "b-view"
    from tests.support.peer_loopback import LocalPeer

    nas = {"kind": "file", "label": "nas", "path": str(src)}
    peer = LocalPeer("pull", pull_req(dst, entry("w.bin", len(data), src, [nas]), rate=1e6))
    try:
        peer.wait_for(lambda ev: ev["event"] == "progress" and ev["done"] > 0)
        with open(src, "r+b") as f:  # same size, one byte changed ahead of the reader
            os.pwrite(f.fileno(), b"\xff", len(data) - 10)
        got, error = peer.finish(60)
    finally:
        peer.stop()
    assert error is None and got["files"] == [], (got, error)
    (why,) = got["errors"]
    assert "changed while it was read" in why, why
    assert not (dst / "w.bin").exists() and [p.name for p in dst.iterdir()] == []


def test_an_unchanged_nas_read_is_hashed_and_says_so(tmp_path):
    data = payload(300_000, 4)
    src = nas_file(tmp_path, data)
    nas = {"kind": "file", "label": "nas", "path": str(src)}
    got, error, _ = pulling(pull_req(tmp_path / "v", entry("w.bin", len(data), src, [nas])))
    assert error is None and got["errors"] == []
    (f,) = got["files"]
    assert f["sha256"] == hashlib.sha256(data).hexdigest()
    assert f["verified"] == "sha256 of this node's NAS read, the file unchanged during the read"


def hand_made(snap, names) -> None:
    """Make the snapshot entries of `names` regular files (a cache made by hand): no blob names."""
    for n in names:
        data = (snap / n).read_bytes()
        (snap / n).unlink()
        (snap / n).write_bytes(data)


def test_without_blob_digests_each_shard_is_read_once_and_checked_against_that_read(nodes, tmp_path):
    """A hand-made cache on the four sshd nodes: each shard's first receiver reads the NAS (once in all: the
    FIFO counts), and every other node's copy is checked against that read's SHA-256, handed on by the
    controller; the report says so per file."""
    group, dst = nodes
    files = default_files()
    snap = make_cache(tmp_path / "nas" / "hub", files)
    hand_made(snap, LOCAL)
    wanted = [FanoutFile(n, len(files[n]), f"{snap}/{n}") for n in LOCAL]  # no SHA-256 known
    plan = plan_fanout({h.name: wanted for h in group})
    nas = FifoNas(snap, {n: files[n] for n in LOCAL})
    jobs, events = NodeJobs(), []
    try:
        report = fan_out(group, plan, dst, binds=BINDS, on_event=collect(events), jobs=jobs, peer=QUICK)
    finally:
        nas.close()
    assert nas.opens == {LOCAL[0]: 1, LOCAL[1]: 1}
    assert_copies(group, dst, files)
    for c in plan.chains:
        reader = c.receivers[0]
        assert report.trust[c.file.name] == (
            f"no blob digest: sha256 of {reader}'s NAS read, given to the other receivers by the controller"
        )
        for f in report.files:
            if f.name != c.file.name:
                continue
            if f.node == reader:
                assert f.source == "nas" and f.verified.startswith("sha256 of this node's NAS read")
            else:
                assert f.source != "nas" and f.verified == f"sha256 of {reader}'s NAS read"
            assert f.sha256 == hashlib.sha256(files[f.name]).hexdigest()
    assert not any("vouched" in f.verified for f in report.files)
    assert report.record()["trust"] == report.trust
    assert peers_left(group, jobs) == {}


@pytest.mark.parametrize("spelling", ["blob name", "given"])
def test_a_file_with_a_digest_is_checked_against_it_by_every_receiver(spelling):
    f = FanoutFile("x", 1, "/nas/x", "ab" * 32, spelling)
    plan = plan_fanout({"n1": [f], "n2": [f]})
    text = "sha256 = blob name" if spelling == "blob name" else "sha256 given"
    assert plan.trust() == {"x": f"{text}, checked by every receiver"}
