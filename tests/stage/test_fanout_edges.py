"""The fan-out's servers and pulls at their edges (issue 25, items 2-4; docs/fanout.md, "Protocol"), with the
node script run on loopback addresses of this machine (tests/support/peer_loopback.py): requests without a
token keep no server alive, a trickling source is left, a zero-byte range is no pull, slow connections are
capped and cut, only allowed addresses connect, a bad byte then a cut is retried from zero, a peer's escape
codes are not printed, no wildcard bind, and a crashed run's temp files are adopted or left as they should be.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time

import pytest

from labkit.stage.fanout import FanoutFile, plan_fanout
from labkit.stage.fanout_report import FanoutReport, add_refusals
from labkit.stage.peer_ops import printable, run_peer
from labkit.stage.reports import NodeReport, StageReport, ViewReport
from tests.stage.test_fanout_trust import TOKEN, entry, nas_file, offer, pull_req
from tests.support.hf_cache import payload
from tests.support.peer_loopback import (
    OUTSIDER,
    B,
    FakePeer,
    LocalPeer,
    ask,
    closed_by_peer,
    connect,
    head,
    pulling,
    serving,
)

SIZE = 600_000


@pytest.fixture
def shard(tmp_path):
    """(path on the "NAS", its bytes, their SHA-256)."""
    data = payload(SIZE, 11)
    return nas_file(tmp_path, data), data, hashlib.sha256(data).hexdigest()


def test_requests_without_a_right_token_do_not_keep_a_server_alive(shard):
    """One wrong-token request every 0.1 s, more often than the 1 s idle time: the server still ends idle."""
    path, _, _ = shard
    server, endpoint = serving(offer(path, "w.bin", SIZE, {TOKEN: "B"}, idle=1.0, lifetime=60))
    statuses, deadline = [], time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            try:
                statuses.append(ask(endpoint, B, "/f/w.bin", "w" * 32))
            except OSError:  # refused: the server has gone
                break
            time.sleep(0.1)
        got, error = server.finish(30)
    finally:
        server.stop()
    assert time.monotonic() < deadline, "the server was still up after 30 s of wrong-token requests"
    assert error is None and got["ended"] == "idle", (got, error)
    assert statuses and set(statuses) == {403}
    # each refusal counted (one may have been cut off as the server ended, and never seen here)
    assert set(got["refused"]) == {"no or wrong token"}
    assert len(statuses) <= got["refused"]["no or wrong token"] <= len(statuses) + 1


def test_a_trickling_source_is_left_for_the_next(tmp_path, shard):
    """A source that sends a byte every 20 ms, under the request's floor: the pull leaves it for the NAS."""
    path, data, sha = shard

    def trickle(request_head: bytes):
        yield head("200 OK", SIZE, SIZE)
        for i in range(20 * 30):  # 30 s of it at most
            yield data[i : i + 1]

    slow = FakePeer("127.0.0.24", trickle, pace=0.02)
    try:
        peer = {"kind": "peer", "label": "slow", "address": slow.endpoint[0], "port": slow.endpoint[1]}
        sources = [{**peer, "token": TOKEN}, {"kind": "file", "label": "nas", "path": str(path)}]
        req = pull_req(tmp_path / "v", entry("w.bin", SIZE, path, sources, sha256=sha), floor=1e5, window=0.5)
        got, error, _ = pulling(req)
    finally:
        slow.close()
    assert error is None and got["errors"] == [], (got, error)
    (f,) = got["files"]
    assert f["source"] == "nas" and len(f["tried"]) == 1
    assert f["tried"][0].startswith("slow: sent ") and "under the floor of 100000 B/s" in f["tried"][0]
    assert (tmp_path / "v" / "w.bin").read_bytes() == data


def test_a_zero_byte_range_is_no_completed_pull(tmp_path, shard):
    """A request for the bytes from the end (nothing) is refused and does not end the server; the real
    pull after it does."""
    path, data, sha = shard
    server, endpoint = serving(offer(path, "w.bin", SIZE, {TOKEN: "B"}))
    try:
        assert ask(endpoint, B, "/f/w.bin", TOKEN, range_from=SIZE) == 416
        src = {"kind": "peer", "label": "A", "address": endpoint[0], "port": endpoint[1], "token": TOKEN}
        got, error, _ = pulling(pull_req(tmp_path / "v", entry("w.bin", SIZE, path, [src], sha256=sha)))
        result, _ = server.finish(30)
    finally:
        server.stop()
    assert error is None and got["errors"] == [] and got["files"][0]["source"] == "A", (got, error)
    assert result["ended"] == "done" and result["served"] == {"w.bin": 1}
    assert result["refused"] == {f"nothing to send from byte {SIZE} of {SIZE}": 1}


def dripping(socks: list, seconds: float) -> list:
    """Send each socket one more byte of a request head every 0.2 s, for at most `seconds`; the sockets the
    other end has not closed by then."""
    left, deadline = list(socks), time.monotonic() + seconds
    for s in left:
        s.setblocking(False)
    while left and time.monotonic() < deadline:
        for s in list(left):
            try:
                s.send(b"a")
                if s.recv(1) == b"":
                    left.remove(s)
            except BlockingIOError:
                pass
            except OSError:  # reset, or a broken pipe: closed
                left.remove(s)
        time.sleep(0.2)
    return left


def test_a_flood_of_slow_connections_is_capped_and_cut_and_the_server_still_serves(tmp_path, shard):
    """Twelve connections that send a request head a byte at a time (each byte well within any read
    timeout): past the cap they are closed at once, the rest at the head deadline, and a real pull then
    gets its file."""
    path, data, sha = shard
    server, endpoint = serving(offer(path, "w.bin", SIZE, {TOKEN: "B"}, conns=4, head=1.0))
    try:
        flood = [connect(endpoint, B) for _ in range(12)]
        for s in flood:
            try:
                s.sendall(b"GET /f/w.bin HTTP/1.0\r\nX-Slow: ")
            except OSError:
                pass
        assert dripping(flood, 20) == []  # none held past the head deadline
        for s in flood:
            s.close()
        src = {"kind": "peer", "label": "A", "address": endpoint[0], "port": endpoint[1], "token": TOKEN}
        got, error, _ = pulling(pull_req(tmp_path / "v", entry("w.bin", SIZE, path, [src], sha256=sha)))
        result, _ = server.finish(30)
    finally:
        server.stop()
    assert error is None and got["files"][0]["source"] == "A", (got, error)
    refused = result["refused"]
    assert refused["over 4 connections"] >= 1 and refused["no request head within 1 s"] >= 1, refused
    assert refused["over 4 connections"] + refused["no request head within 1 s"] == 12, refused


def test_an_address_not_allowed_is_closed_before_its_request_is_read(shard):
    path, _, _ = shard
    server, endpoint = serving(offer(path, "w.bin", SIZE, {TOKEN: "B"}))
    try:
        s = connect(endpoint, OUTSIDER)
        s.sendall(b"GET /f/w.bin HTTP/1.0\r\nX-Labkit-Token: " + TOKEN.encode() + b"\r\n\r\n")
        assert closed_by_peer(s, 10)  # no answer at all, though the token is right
        s.close()
        assert ask(endpoint, B, "/f/nothing", TOKEN) == 404  # the allowed receiver is answered
    finally:
        server.stop()
    refused = [ev for ev in server.events if ev["event"] == "refused"]
    assert [(ev["client"], ev["why"]) for ev in refused][0] == (OUTSIDER, "not an allowed receiver")


def test_a_bad_byte_then_a_cut_is_retried_from_zero_on_the_last_source(tmp_path, shard):
    """The first source sends 200 KB with one byte wrong and hangs up; the NAS resumes at 200 KB, the digest
    fails at the end, and the NAS is read once more from byte 0."""
    path, data, sha = shard
    bad = bytearray(data[:200_000])
    bad[1234] ^= 0xFF

    liar = FakePeer("127.0.0.25", lambda h: [head("200 OK", SIZE, SIZE) + bytes(bad)])
    try:
        peer = {"kind": "peer", "label": "liar", "address": liar.endpoint[0], "port": liar.endpoint[1]}
        sources = [{**peer, "token": TOKEN}, {"kind": "file", "label": "nas", "path": str(path)}]
        got, error, _ = pulling(pull_req(tmp_path / "v", entry("w.bin", SIZE, path, sources, sha256=sha)))
    finally:
        liar.close()
    assert error is None and got["errors"] == [], (got, error)
    (f,) = got["files"]
    assert f["source"] == "nas" and f["sha256"] == sha
    assert f["tried"][0].startswith("liar: the stream ended at byte 200000")
    assert f["tried"][1].startswith("nas: sha256 ") and f["tried"][1].endswith(f"expected {sha}")
    assert (tmp_path / "v" / "w.bin").read_bytes() == data


ESCAPES = "\x1b]0;owned\x07\x1b[2J\x9b31m\u202e"


def test_escape_codes_in_a_peers_answer_are_not_printed(tmp_path, shard):
    """A peer whose reason phrase and size header carry terminal escapes: what the pull prints quotes them
    as escapes; and the controller makes every string of a peer op's output printable as well."""
    path, data, sha = shard
    esc = ESCAPES.encode()
    reply = b"HTTP/1.0 200 " + esc + b"\r\nX-Labkit-Size: " + esc + b"\r\nContent-Length: 0\r\n\r\n"
    rogue = FakePeer("127.0.0.26", lambda h: [reply])
    try:
        peer = {"kind": "peer", "label": "rogue", "address": rogue.endpoint[0], "port": rogue.endpoint[1]}
        sources = [{**peer, "token": TOKEN}, {"kind": "file", "label": "nas", "path": str(path)}]
        got, error, run = pulling(pull_req(tmp_path / "v", entry("w.bin", SIZE, path, sources, sha256=sha)))
    finally:
        rogue.close()
    assert error is None and got["files"][0]["source"] == "nas", (got, error)
    (why,) = got["files"][0]["tried"]
    assert why.startswith("rogue: answered HTTP 200 ") and "\\x1b" in why, why
    decoded = [ev for ev in run.events]  # every line as the controller decodes it
    assert not [c for ev in decoded for c in repr_strings(ev) if not c.isprintable()]
    # the controller side, for output of any peer op
    line = (
        '{"event": "fallback", "why": "\\u001b[2Jhi\\u0007"}\n{"event": "result", "data": {"e": "\\u001b"}}\n'
    )

    class Node:
        name = "n1"

        def run(self, cmd, timeout=None, stdin=None):
            from labkit.nodes import Result

            return Result("n1", "x", line, "", 0)

    seen: list[dict] = []
    assert run_peer(Node(), "pull", {}, on_event=seen.append) == {"e": "\\x1b"}
    assert seen == [{"event": "fallback", "why": "\\x1b[2Jhi\\x07"}]
    assert printable(ESCAPES) == "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m\\u202e"


def repr_strings(value) -> str:
    """Every character of every string in decoded JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return "".join(repr_strings(k) + repr_strings(v) for k, v in value.items())
    if isinstance(value, list):
        return "".join(map(repr_strings, value))
    return ""


@pytest.mark.parametrize(
    "bind",
    [
        "0.0.0.0",
        "0",
        "0.0.0",
        "0x0",
        "00.0.0.0",
        "::",
        "::0",
        "0:0::0",
        "::ffff:0.0.0.0",
        "::ffff:0:0",
        "",
        " ",
    ],
)
def test_a_wildcard_bind_is_refused_in_every_spelling(shard, bind):
    path, _, _ = shard
    peer = LocalPeer("serve", {**offer(path, "w.bin", SIZE, {TOKEN: "B"}), "bind": bind})
    try:
        got, error = peer.finish(30)
    finally:
        peer.stop()
    assert got is None and "refusing to listen on every address" in error, (got, error)


def test_a_crashed_runs_temp_files_are_adopted_removed_or_left_alone(tmp_path, shard):
    """In the view: a crashed run's half copy (adopted: the pull resumes after it, and the digest judges it),
    another crashed run's file (removed) and a live run's (held under its lock: left)."""
    path, data, sha = shard
    dst = tmp_path / "v"
    dst.mkdir()
    half, other, live = (dst / f".labkit-partial.w.bin.{run}" for run in ("deadbeef", "0badf00d", "cafe0123"))
    half.write_bytes(data[: SIZE // 2])
    other.write_bytes(b"x" * 1000)
    live.write_bytes(b"y" * 10)
    held = os.open(live, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_SH)  # a live run holds its temp file
    try:
        nas = {"kind": "file", "label": "nas", "path": str(path)}
        got, error, run = pulling(pull_req(dst, entry("w.bin", SIZE, path, [nas], sha256=sha)))
    finally:
        os.close(held)
    assert error is None and got["errors"] == [], (got, error)
    (f,) = got["files"]
    assert f["adopted"] == SIZE // 2 and f["sha256"] == sha and (dst / "w.bin").read_bytes() == data
    assert sorted(p.name for p in dst.iterdir()) == sorted(["w.bin", live.name])
    actions = {ev["path"]: ev["action"] for ev in run.events if ev["event"] == "leftover"}
    assert actions == {str(half): "adopted", str(other): "removed", str(live): "kept: a live run holds it"}
    progress = [ev["done"] for ev in run.events if ev["event"] == "progress"]
    assert progress[0] == SIZE // 2  # it went on from the adopted bytes
    # without a digest the leftovers are only removed: nothing could judge their bytes
    again = tmp_path / "v2"
    again.mkdir()
    (again / half.name).write_bytes(data[: SIZE // 2])
    got, error, _ = pulling(pull_req(again, entry("w.bin", SIZE, path, [nas])))
    assert error is None and got["files"][0]["adopted"] == 0
    assert [p.name for p in again.iterdir()] == ["w.bin"]


def test_wrong_token_attempts_are_counted_in_the_staging_report():
    f = FanoutFile("w.bin", 10, "/nas/w.bin", "ab" * 32, "blob name")
    plan = plan_fanout({"n1": [f], "n2": [f]})
    refused: dict[str, dict[str, int]] = {}
    add_refusals(refused, {"n1": {"refused": {"no or wrong token": 3, "not an allowed receiver": 1}}})
    add_refusals(refused, {"n1": {"refused": {"no or wrong token": 2}}, "n2": {"error": "did not start"}})
    report = FanoutReport(plan, [], {}, [], 1.0, plan.trust(), refused)
    record = report.record()
    assert record["refused"] == {"n1": {"no or wrong token": 5, "not an allowed receiver": 1}}
    assert record["wrong_tokens"] == 5 and record["trust"] == {
        "w.bin": "sha256 = blob name, checked by every receiver"
    }
    view = ViewReport("/v", "r", "main", "c" * 40, False, [], {"n1": NodeReport("n1", "c")}, {"n1": False},
                      fanout=record)  # fmt: skip
    text = StageReport([view], 1.0).table()
    assert "fan-out trust: w.bin: sha256 = blob name, checked by every receiver" in text
    assert "refused by n1's fan-out server: 5 no or wrong token, 1 not an allowed receiver" in text
    assert StageReport([view], 1.0).to_dict()["views"][0]["fanout"]["wrong_tokens"] == 5
