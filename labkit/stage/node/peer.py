"""Node-to-node fan-out of staging copies (docs/fanout.md, "Protocol"): `serve` offers this node's copies of
named files over HTTP on one address, even while they are being written; `pull` fetches files from the first
source that works, renaming each into place only after its SHA-256 checked out. STANDALONE, stdlib only, its
own op, apart from the node script (script.py): `python3 -I -S -c SCRIPT {serve|pull} -`, the request JSON on
stdin (so the token is on no argv); JSON lines out like the node script's, one "result" or "error" last.
A server exits at `lifetime` s whatever happens (SIGALRM's default action), so none outlives its controller.
Test-only fault, off unless the request names it: serve's "flip": {name: offset} inverts that byte in all it
sends of the file, after hashing, as a fault on the wire would.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

PARTIAL_PREFIX = ".labkit-partial."
TOKEN_HEADER, SIZE_HEADER, VERIFY_HEADER = "X-Labkit-Token", "X-Labkit-Size", "X-Labkit-Verify"
SEND_CHUNK = 64 * 1024 * 1024  # bytes per sendfile call
READ_CHUNK = 4 * 1024 * 1024  # bytes per read: how soon the next node down the chain sees what arrived
PROGRESS_EVERY = 0.5
POLL = 0.02  # seconds between looks at a growing file
_OUT = threading.Lock()


class Fail(Exception):
    """An expected failure: an {"event": "error"}, or a source that did not work."""


def emit(event: str, **fields) -> None:
    fields["event"] = event
    with _OUT:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


def bare_name(name) -> str:
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or "\0" in name:
        raise Fail(f"refusing file name {name!r}: expected a bare file name")
    return name


def absolute(path, what: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or ".." in path.split("/") or "\0" in path:
        raise Fail(f"refusing {what} {path!r}: expected an absolute path without '..'")
    return os.path.normpath(path)


def blob_digest(path) -> str | None:
    """The SHA-256 an HF cache names a file's blob by (`blobs/<sha256>`, where the snapshot link points)."""
    base = os.path.basename(os.path.realpath(path)) if path else ""
    return base if len(base) == 64 and all(c in "0123456789abcdef" for c in base) else None


class Bucket:
    """One byte rate shared by every stream of the process (0: none): a throttled NAS stand-in, slow tests."""

    def __init__(self, rate) -> None:
        self.rate, self.next, self.lock = float(rate or 0), time.monotonic(), threading.Lock()

    def take(self, n: int) -> int:
        """How many of `n` bytes to send now, after waiting for their turn."""
        if self.rate <= 0:
            return n
        n = min(n, max(64 * 1024, int(self.rate / 20)))
        with self.lock:
            now = time.monotonic()
            self.next = max(self.next, now) + n / self.rate
            wait = self.next - now
        time.sleep(wait)
        return n


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


class Receiving:
    """One file coming in: its temp file in the view, the running SHA-256, progress lines."""

    def __init__(self, dst: str, f: dict) -> None:
        self.name, self.size, partial = bare_name(f["name"]), int(f["size"]), bare_name(f["partial"])
        if not partial.startswith(PARTIAL_PREFIX):
            raise Fail(f"refusing temp name {partial!r}: expected {PARTIAL_PREFIX}*")
        self.tmp, self.final, self.dst = os.path.join(dst, partial), os.path.join(dst, self.name), dst
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW
        self.fd = os.open(self.tmp, flags, 0o644)  # this node's server may have made it
        self.h, self.done = hashlib.sha256(), 0
        self.label, self.t0, self.last, self.start = "", 0.0, 0.0, 0
        if os.fstat(self.fd).st_size:
            self.restart()

    def restart(self) -> None:
        """A new, empty temp file (a server following the old one sees it gone) and a new hash."""
        os.close(self.fd)
        os.unlink(self.tmp)
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self.h, self.done = hashlib.sha256(), 0

    def wrote(self, data: bytes) -> None:
        view, k = memoryview(data), 0
        while k < len(data):
            k += os.pwrite(self.fd, view[k:], self.done + k)
        self.h.update(data)
        self.done += len(data)
        self.progress(force=self.done == self.size)

    def progress(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.last >= PROGRESS_EVERY:
            self.last, rate = now, (self.done - self.start) / max(now - self.t0, 1e-9)
            emit("progress", name=self.name, done=self.done, total=self.size, source=self.label, rate=rate)

    def place(self) -> None:
        os.fsync(self.fd)
        os.replace(self.tmp, self.final)
        os.fsync(fd := os.open(self.dst, os.O_RDONLY))
        os.close(fd)

    def discard(self) -> None:
        os.close(self.fd)
        if os.path.lexists(self.tmp):
            os.unlink(self.tmp)


def drain(read, r: Receiving, what: str) -> None:
    """read(n) -> up to n bytes, until the file is complete; Fail if the source ends early."""
    while r.done < r.size:
        data = read(min(READ_CHUNK, r.size - r.done))
        if not data:
            raise Fail(f"{what} ended at byte {r.done} of {r.size}")
        r.wrote(data)


def fetch(src: dict, r: Receiving, token: str, stall: float, digest_mode: bool) -> str | None:
    """Bytes from r.done to the end from one source into r; in digest mode also the digest the source sent
    after them (the hex SHA-256 of what it sent, once its own copy is in place)."""
    if src["kind"] == "file":
        fd = os.open(absolute(src["path"], "source path"), os.O_RDONLY)
        try:
            if r.done:
                os.lseek(fd, r.done, os.SEEK_SET)
            drain(lambda n: os.read(fd, n), r, src["path"])
        finally:
            os.close(fd)
        return None
    verify = "digest" if digest_mode else "sha256"
    headers = {TOKEN_HEADER: src.get("token") or token, "Range": f"bytes={r.done}-", VERIFY_HEADER: verify}
    conn = http.client.HTTPConnection(src["address"], int(src["port"]), timeout=stall)
    try:
        conn.request("GET", "/f/" + quote(r.name), headers=headers)
        resp = conn.getresponse()
        if resp.status not in (200, 206) or resp.getheader(SIZE_HEADER) != str(r.size):
            raise Fail(f"answered HTTP {resp.status} (size {resp.getheader(SIZE_HEADER)})")
        drain(resp.read1, r, "the stream")  # read1: what the socket has; read would wait for n bytes
        vouched = resp.read(64).decode() if digest_mode else None
        if vouched is not None and len(vouched) != 64:  # None exactly when not digest_mode
            raise Fail("sent the file but no digest to vouch for it")
        return vouched
    finally:
        conn.close()


def pull_file(dst: str, f: dict, token: str, stall: float) -> dict:
    """Fetch one file from the first source that works; verified, then renamed into place."""
    given = f.get("sha256")
    expected = given or blob_digest(f.get("blob"))
    how = "sha256 given" if given else "sha256 = blob name" if expected else None
    r, tried, t0 = Receiving(dst, f), [], time.monotonic()
    try:
        for src in f["sources"]:
            label = str(src.get("label") or src["kind"])
            if r.done and not expected:
                r.restart()  # without an expected digest the bytes must all come from the one source
            r.label, r.t0, r.start = label, time.monotonic(), r.done
            r.progress(force=True)
            bad = False
            try:
                vouched = fetch(src, r, token, stall, expected is None and src["kind"] != "file")
                want = expected or vouched or r.h.hexdigest()  # no digest, a file source: what was read is it
                bad = r.h.hexdigest() != want
                if bad:
                    raise Fail(f"sha256 {r.h.hexdigest()} of the bytes received, expected {want}")
            except (Fail, OSError, http.client.HTTPException, ValueError) as e:
                tried.append(f"{label}: {e}")
                emit("fallback", name=r.name, source=label, at=r.done, why=str(e))
                if bad:
                    r.restart()  # the wrong byte may be anywhere
                continue
            r.place()
            verified = how or (f"sha256 vouched for by {label}" if vouched else "size only (no digest known)")
            seconds = time.monotonic() - t0
            return {"name": r.name, "bytes": r.size, "seconds": seconds, "source": label,
                    "sha256": r.h.hexdigest(), "verified": verified, "tried": tried}  # fmt: skip
        raise Fail(f"{r.name}: no source worked: " + "; ".join(tried))
    except BaseException:
        r.discard()
        raise


def pull(req: dict) -> dict:
    dst = absolute(req["dst"], "view path")
    os.makedirs(dst, exist_ok=True)
    out, errors = {}, []

    def one(f: dict) -> None:
        try:
            out[f["name"]] = pull_file(dst, f, str(req["token"]), float(req.get("stall", 60)))
        except (Fail, OSError) as e:
            errors.append(str(e))

    threads = [threading.Thread(target=one, args=(f,), daemon=True) for f in req["files"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"files": [out[f["name"]] for f in req["files"] if f["name"] in out], "errors": errors}


def main(argv: list) -> int:
    ops = {"serve": serve, "pull": pull}
    if len(argv) != 3 or argv[1] not in ops or argv[2] != "-":
        emit("error", message=f"usage: peer.py {{serve|pull}} - (request JSON on stdin), got {argv[1:]!r}")
        return 2
    try:
        emit("result", data=ops[argv[1]](json.loads(sys.stdin.read())))
    except (Fail, OSError) as e:
        why = f"{e.filename or ''}: {e.strerror or e}".lstrip(": ") if isinstance(e, OSError) else str(e)
        emit("error", message=why)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
