"""The serving side of the fan-out (docs/fanout.md, "Protocol" and "Trust"): offer named copies of this node
over HTTP on one address, even while this node's own pull is still writing them. Part of the peer script
(`peer.py`).

Before a byte of a request is read, the client's address must be one of the `allow` list (the other nodes'
fabric addresses) and fewer than `conns` connections may be open; a request head must be in within `head`
seconds. Only then is a token looked at: each (receiver, file) has its own, and only a request with one counts
as activity (the idle timer, the in-flight count). A pull is complete when every byte from the receiver's
offset was sent; a token that got a whole file from byte 0 is spent.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from labkit.stage.node.peer_temp import open_held, take_over
from labkit.stage.node.peer_wire import (
    POLL,
    SEND_CHUNK,
    SIZE_HEADER,
    TOKEN_HEADER,
    Bucket,
    Fail,
    absolute,
    bare_name,
    clean,
    emit,
)


class Offered:
    """One file a server offers: an fd on the copy (its temp file, made here, when still to be written), its
    final size, the token of each receiver that may fetch it, and who got it whole."""

    def __init__(self, entry: dict) -> None:
        self.name, self.size = bare_name(entry["name"]), int(entry["size"])
        path = absolute(entry["path"], "served file")
        self.final = absolute(entry["final"], "final name") if entry.get("final") else None
        self.tokens = {str(t): str(who) for t, who in (entry.get("tokens") or {}).items()}
        if not self.tokens or any(len(t) < 32 for t in self.tokens):
            raise Fail(f"{self.name}: no receiver tokens (at least 32 characters each) in the request")
        flags = os.O_RDONLY
        if self.final:
            folder, own = os.path.split(path)
            os.makedirs(folder, exist_ok=True)
            adopted = take_over(folder, self.name, own, self.size, bool(entry.get("adopt")))
            flags |= os.O_CREAT | (0 if adopted else os.O_EXCL)
        self.fd = open_held(path, flags)
        st = os.fstat(self.fd)
        if not self.final and st.st_size != self.size:
            raise Fail(f"{path} has {st.st_size} bytes, expected {self.size}")
        self.file = os.fdopen(os.dup(self.fd), "rb", buffering=0)
        self.done, self.done_by, self.spent = 0, set[str](), set[str]()

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


def numeric(address) -> str:
    """The numeric form of an address or name (its first resolution)."""
    try:
        return str(socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)[0][4][0])
    except (OSError, TypeError, UnicodeError) as e:
        raise Fail(f"cannot resolve address {clean(address)!r}: {clean(e)}")


def every_address(address: str) -> bool:
    """True for a wildcard in any spelling (0.0.0.0, 0, ::, ::0, ::ffff:0.0.0.0, ...), given numerically."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_unspecified or (mapped is not None and mapped.is_unspecified)


class PeerServer(ThreadingHTTPServer):
    """The HTTP server and what its handlers share: who may connect, the offered files and their tokens,
    expected pulls, open connections and their head deadlines, counts of refusals, rate, faults."""

    daemon_threads = True

    def __init__(self, req: dict, family: int, address: str) -> None:
        self.address_family = family
        self.allow = {numeric(a) for a in req.get("allow") or ()}
        if not self.allow:
            raise Fail("no receiver addresses to allow ('allow'): nobody could fetch anything")
        self.files = {f.name: f for f in map(Offered, req["files"])}
        self.expect = {bare_name(k): int(v) for k, v in (req.get("expect") or {}).items()}
        self.stall, self.bucket = float(req.get("stall", 60)), Bucket(req.get("rate"))
        self.head, self.conns = float(req.get("head", 10)), int(req.get("conns", 16))
        self.spend = bool(req.get("spend", True))
        self.flip = {bare_name(k): int(v) for k, v in (req.get("flip") or {}).items()}
        self.lock, self.inflight, self.last = threading.Lock(), 0, time.monotonic()
        self.refused: dict[str, int] = {}
        self.heads: dict[object, float] = {}  # connection -> deadline of its request head (inf once read)
        super().__init__((address, 0), Handler)

    def count(self, why: str, client: str, path: str = "", code: int | None = None) -> None:
        with self.lock:
            self.refused[why] = self.refused.get(why, 0) + 1
        emit("refused", client=client, path=clean(path), code=code, why=why)

    def verify_request(self, request, client_address) -> bool:
        """Before anything is read: an allowed address, and room for one more connection."""
        client = str(client_address[0])
        if client not in self.allow:
            self.count("not an allowed receiver", client)
            return False
        with self.lock:
            full = len(self.heads) >= self.conns
            if not full:
                self.heads[request] = time.monotonic() + self.head
        if full:
            self.count(f"over {self.conns} connections", client)
        return not full

    def shutdown_request(self, request) -> None:
        with self.lock:
            self.heads.pop(request, None)
        super().shutdown_request(request)

    def head_read(self, request) -> None:
        with self.lock:
            if request in self.heads:
                self.heads[request] = float("inf")

    def reap(self) -> None:
        """Cut each connection whose request head did not come within `head` seconds."""
        now = time.monotonic()
        with self.lock:
            late = [c for c, deadline in self.heads.items() if deadline < now]
            for c in late:
                self.heads[c] = float("inf")
        for c in late:
            self.count(f"no request head within {self.head:g} s", _peer_of(c))
            try:
                c.shutdown(socket.SHUT_RDWR)  # type: ignore[attr-defined]  # the accepted socket
            except OSError:
                pass

    def holder(self, token: str) -> tuple[Offered, str, str] | None:
        """(file, receiver, token) the token was made for; every offered token compared in constant time."""
        found = None
        for f in self.files.values():
            for t, who in f.tokens.items():
                if hmac.compare_digest(t.encode(), token.encode()) and found is None:
                    found = (f, who, t)
        return found

    def busy(self, delta: int) -> None:
        with self.lock:
            self.inflight += delta
            self.last = time.monotonic()

    def finished(self) -> bool:
        with self.lock:
            return not self.inflight and all(len(self.files[n].done_by) >= k for n, k in self.expect.items())

    def send(self, sock, f: Offered, pos: int) -> None:
        """Stream `f` from `pos` to its end (zero-copy unless a fault needs the bytes here)."""
        flip = self.flip.get(f.name)
        while pos < f.size:
            n = self.bucket.take(min(f.ready(pos, self.stall), SEND_CHUNK))
            if flip is None:
                pos += sock.sendfile(f.file, pos, n)
                continue
            data = os.pread(f.fd, n, pos)
            if pos <= flip < pos + len(data):
                data = data[: flip - pos] + bytes([data[flip - pos] ^ 0xFF]) + data[flip - pos + 1 :]
            sock.sendall(data)
            pos += len(data)


def _peer_of(conn) -> str:
    try:
        return str(conn.getpeername()[0])
    except OSError:
        return "?"


class Handler(BaseHTTPRequestHandler):
    server_version = "labkit-peer"
    server: PeerServer  # only PeerServer serves it (http.server declares BaseServer)

    def log_message(self, format, *args) -> None:  # requests are events, not stderr lines
        pass

    def do_GET(self) -> None:
        self.server.head_read(self.connection)
        try:
            self.answer(self.server)
        except (OSError, Fail) as e:  # the receiver went away, or this node gave its copy up
            emit("cut", client=self.client_address[0], path=clean(self.path), why=clean(e))

    def refuse(self, code: int, why: str) -> None:
        self.server.count(why, self.client_address[0], self.path, code)
        self.send_error(code)

    def answer(self, srv: PeerServer) -> None:
        hit = srv.holder(self.headers.get(TOKEN_HEADER, ""))
        if hit is None:  # the only refusal before the path is looked at: nothing is told about the files
            return self.refuse(403, "no or wrong token")
        mine, who, token = hit
        f = srv.files.get(unquote(self.path[3:])) if self.path.startswith("/f/") else None
        if f is None:
            return self.refuse(404, "not a file this server offers")
        if f is not mine:
            return self.refuse(403, "a token for another file")
        if token in f.spent:
            return self.refuse(403, "a token already used for a whole copy")
        srv.busy(+1)  # activity: only now, with a token of this file
        try:
            self.deliver(srv, f, who, token)
        finally:
            srv.busy(-1)

    def deliver(self, srv: PeerServer, f: Offered, who: str, token: str) -> None:
        rng = self.headers.get("Range", "")
        pos = int(rng[6:-1]) if rng.startswith("bytes=") and rng.endswith("-") and rng[6:-1].isdigit() else 0
        if rng and not pos and rng != "bytes=0-":
            return self.refuse(416, f"unusable range {clean(rng, 60)!r}")
        if pos >= f.size and (pos or f.size):  # a zero-byte range is no pull
            return self.refuse(416, f"nothing to send from byte {pos} of {f.size}")
        self.send_response(206 if pos else 200)
        self.send_header("Content-Length", str(f.size - pos))
        self.send_header(SIZE_HEADER, str(f.size))
        self.end_headers()
        emit("serving", name=f.name, client=self.client_address[0], receiver=who, offset=pos)
        srv.send(self.connection, f, pos)
        with srv.lock:  # every byte from the receiver's offset went out
            f.done += 1
            f.done_by.add(who)
            if srv.spend and pos == 0:
                f.spent.add(token)
        emit(
            "served", name=f.name, client=self.client_address[0], receiver=who, offset=pos, bytes=f.size - pos
        )


def bind_address(address) -> tuple:
    """(family, numeric address) to bind: an address of this node, or a name it resolves to one; never a
    wildcard, however it is spelt."""
    if not isinstance(address, str) or not address.strip():
        raise Fail(f"refusing to listen on every address ({address!r}): give the node's fabric address")
    try:
        family, _, _, _, addr = socket.getaddrinfo(address, 0, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as e:
        raise Fail(f"cannot resolve bind address {clean(address)!r}: {clean(e)}")
    if every_address(str(addr[0])):
        raise Fail(
            f"refusing to listen on every address ({clean(address)!r}): give the node's fabric address"
        )
    return family, str(addr[0])


def serve(req: dict) -> dict:
    signal.alarm(max(1, int(float(req["lifetime"]))))  # the bound on this process, whatever else happens
    family, address = bind_address(req["bind"])
    srv = PeerServer(req, family, address)
    bound = str(srv.server_address[0])
    if every_address(bound):
        raise Fail(f"bound {bound}, which is every address")
    Handler.timeout = srv.stall  # a receiver that stops reading ends its response
    emit("listening", address=address, port=srv.server_address[1], pid=os.getpid())
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    idle, ended = float(req.get("idle", 120)), "idle"
    while time.monotonic() - srv.last < idle or srv.inflight:
        if srv.expect and srv.finished():
            ended = "done"
            break
        srv.reap()
        time.sleep(0.05)
    srv.shutdown()
    srv.server_close()
    served = {n: f.done for n, f in srv.files.items()}
    return {"served": served, "refused": dict(srv.refused), "ended": ended}
