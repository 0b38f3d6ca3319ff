"""The receiving side of the fan-out (docs/fanout.md, "Protocol"): fetch each file from the first source that
works into a temp file, and rename it into place only after its SHA-256 checked out. Part of the peer script
(`peer.py`).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import threading
import time
from urllib.parse import quote

from labkit.stage.node.peer_wire import (
    PARTIAL_PREFIX,
    PROGRESS_EVERY,
    READ_CHUNK,
    SIZE_HEADER,
    TOKEN_HEADER,
    VERIFY_HEADER,
    Fail,
    absolute,
    bare_name,
    blob_digest,
    emit,
)


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
