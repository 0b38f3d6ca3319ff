"""The serving side of the fan-out (docs/fanout.md, "Protocol"): offer named copies of this node over HTTP on
one address, even while this node's own pull is still writing them. Part of the peer script (`peer.py`).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from labkit.stage.node.peer_wire import (
    POLL,
    SEND_CHUNK,
    SIZE_HEADER,
    TOKEN_HEADER,
    VERIFY_HEADER,
    Bucket,
    Fail,
    absolute,
    bare_name,
    emit,
)


class Offered:
    """One file a server offers: an fd on the copy (created here if still to be written), its final size."""

    def __init__(self, entry: dict) -> None:
        self.name, self.size = bare_name(entry["name"]), int(entry["size"])
        path = absolute(entry["path"], "served file")
        self.final = absolute(entry["final"], "final name") if entry.get("final") else None
        if self.final:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        self.fd = os.open(path, os.O_RDONLY | (os.O_CREAT | os.O_EXCL if self.final else 0), 0o644)
        st = os.fstat(self.fd)
        if not self.final and st.st_size != self.size:
            raise Fail(f"{path} has {st.st_size} bytes, expected {self.size}")
        self.key, self.file = (st.st_dev, st.st_ino), os.fdopen(os.dup(self.fd), "rb", buffering=0)
        self.done = 0

    def ready(self, pos: int, stall: float) -> int:
        """Bytes readable at `pos`, waiting while the local pull writes them; Fail if it gave the copy up."""
        deadline, seen = time.monotonic() + stall, -1
        while True:
            st = os.fstat(self.fd)
            if st.st_nlink == 0 or st.st_size < pos:
                raise Fail(f"{self.name}: this node's copy was abandoned")
            if st.st_size > pos:
                return min(st.st_size, self.size) - pos
            if st.st_size != seen:
                deadline, seen = time.monotonic() + stall, st.st_size
            elif time.monotonic() > deadline:
                raise Fail(f"{self.name}: this node's copy stopped growing at {pos} bytes for {stall:g} s")
            time.sleep(POLL)

    def placed(self) -> bool:
        """True once the local pull renamed the copy to its final name (it verified it first)."""
        try:
            return self.final is None or (lambda s: (s.st_dev, s.st_ino))(os.stat(self.final)) == self.key
        except OSError:
            return False


class PeerServer(ThreadingHTTPServer):
    """The HTTP server and what its handlers share: token, offered files, expected pulls, rate, faults."""

    daemon_threads = True

    def __init__(self, req: dict, family: int, address: str) -> None:
        self.address_family = family
        self.token = str(req["token"]).encode()
        self.files = {f.name: f for f in map(Offered, req["files"])}
        self.expect = {bare_name(k): int(v) for k, v in (req.get("expect") or {}).items()}
        self.stall, self.bucket = float(req.get("stall", 60)), Bucket(req.get("rate"))
        self.flip = {bare_name(k): int(v) for k, v in (req.get("flip") or {}).items()}
        self.lock, self.inflight, self.last, self.refused = threading.Lock(), 0, time.monotonic(), 0
        super().__init__((address, 0), Handler)

    def busy(self, delta: int) -> None:
        with self.lock:
            self.inflight += delta
            self.last = time.monotonic()

    def finished(self) -> bool:
        with self.lock:
            return not self.inflight and all(self.files[n].done >= k for n, k in self.expect.items())

    def send(self, sock, f: Offered, pos: int, hashing: bool) -> str | None:
        """Stream `f` from `pos` to its end (zero-copy unless hashing or a fault needs the bytes here)."""
        h, flip = (hashlib.sha256() if hashing else None), self.flip.get(f.name)
        while pos < f.size:
            n = self.bucket.take(min(f.ready(pos, self.stall), SEND_CHUNK))
            if h is None and flip is None:
                pos += sock.sendfile(f.file, pos, n)
                continue
            data = os.pread(f.fd, n, pos)
            if h is not None:
                h.update(data)
            if flip is not None and pos <= flip < pos + len(data):
                data = data[: flip - pos] + bytes([data[flip - pos] ^ 0xFF]) + data[flip - pos + 1 :]
            sock.sendall(data)
            pos += len(data)
        return h.hexdigest() if h is not None else None


class Handler(BaseHTTPRequestHandler):
    server_version = "labkit-peer"
    server: PeerServer  # only PeerServer serves it (http.server declares BaseServer)

    def log_message(self, format, *args) -> None:  # requests are events, not stderr lines
        pass

    def do_GET(self) -> None:
        self.server.busy(+1)
        try:
            self.answer(self.server)
        except (OSError, Fail) as e:  # the receiver went away, or this node gave its copy up
            emit("cut", client=self.client_address[0], path=self.path[:200], why=str(e))
        finally:
            self.server.busy(-1)

    def refuse(self, code: int, why: str) -> None:
        with self.server.lock:
            self.server.refused += 1
        emit("refused", client=self.client_address[0], path=self.path[:200], code=code, why=why)
        self.send_error(code)

    def answer(self, srv: PeerServer) -> None:
        if not hmac.compare_digest(self.headers.get(TOKEN_HEADER, "").encode(), srv.token):
            return self.refuse(403, "no or wrong token")
        f = srv.files.get(unquote(self.path[3:])) if self.path.startswith("/f/") else None
        if f is None:
            return self.refuse(404, "not a file this server offers")
        rng, hashing = self.headers.get("Range", ""), self.headers.get(VERIFY_HEADER) == "digest"
        pos = int(rng[6:-1]) if rng.startswith("bytes=") and rng.endswith("-") and rng[6:-1].isdigit() else 0
        if (rng and not pos and rng != "bytes=0-") or pos > f.size or (hashing and pos):
            return self.refuse(416, f"unusable range {rng!r}")
        self.send_response(206 if pos else 200)
        self.send_header("Content-Length", str(f.size - pos + (64 if hashing else 0)))
        self.send_header(SIZE_HEADER, str(f.size))
        self.end_headers()
        emit("serving", name=f.name, client=self.client_address[0], offset=pos)
        digest = srv.send(self.connection, f, pos, hashing)
        if digest:  # vouched for only once this node's own copy is verified and in place
            deadline = time.monotonic() + srv.stall
            while not f.placed() and os.fstat(f.fd).st_nlink and time.monotonic() < deadline:
                time.sleep(POLL)
            if not f.placed():
                raise Fail(f"{f.name}: this node's copy was not placed; no digest to vouch for")
            self.wfile.write(digest.encode())
        with srv.lock:
            f.done += 1
        emit("served", name=f.name, client=self.client_address[0], offset=pos, bytes=f.size - pos)


def bind_address(address) -> tuple:
    """(family, numeric address) to bind: an address of this node, or a name it resolves to one."""
    try:
        family, _, _, _, addr = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)[0]
    except (OSError, TypeError) as e:
        raise Fail(f"cannot resolve bind address {address!r}: {e}")
    if addr[0] in ("0.0.0.0", "::"):
        raise Fail("refusing to listen on every address: give the node's fabric address")
    return family, addr[0]


def serve(req: dict) -> dict:
    signal.alarm(max(1, int(float(req["lifetime"]))))  # the bound on this process, whatever else happens
    family, address = bind_address(req["bind"])
    srv = PeerServer(req, family, address)
    Handler.timeout = srv.stall  # a receiver that stops reading ends its response
    emit("listening", address=address, port=srv.server_address[1], pid=os.getpid())
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    idle, ended = float(req.get("idle", 120)), "idle"
    while time.monotonic() - srv.last < idle or srv.inflight:
        if srv.expect and srv.finished():
            ended = "done"
            break
        time.sleep(0.05)
    srv.shutdown()
    srv.server_close()
    return {"served": {n: f.done for n, f in srv.files.items()}, "refused": srv.refused, "ended": ended}
