"""The receiving side of the fan-out (docs/fanout.md, "Protocol" and "Trust"): fetch each file from the first
source that works into a temp file, and rename it into place only after its SHA-256 checked out. Part of the
peer script (`peer.py`).

The digest a file is checked against never comes from a peer: it is the request's (the blob name, or the
SHA-256 of another node's NAS read, both given by the controller) or the blob name of the snapshot entry on
the NAS. A file without one is taken from the NAS only, and a NAS read that changed while it was read is
refused. A source that is not the last one must keep up `floor` bytes/s over each `window` seconds.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import stat
import threading
import time
from urllib.parse import quote

from labkit.stage.node.peer_temp import open_held, take_over
from labkit.stage.node.peer_wire import (
    PARTIAL_PREFIX,
    PROGRESS_EVERY,
    READ_CHUNK,
    SIZE_HEADER,
    TOKEN_HEADER,
    Bucket,
    Fail,
    absolute,
    bare_name,
    blob_digest,
    clean,
    emit,
)

NAS_LABEL = (
    "nas"  # the label of a read of the shared cache (or its stand-in): the only source without a digest
)


class Changed(Fail):
    """A NAS file whose size, times or inode differ after the read from before it."""


class Receiving:
    """One file coming in: its temp file in the view (held, see peer_temp), the running SHA-256, progress."""

    def __init__(self, dst: str, f: dict, resumable: bool) -> None:
        self.name, self.size, partial = bare_name(f["name"]), int(f["size"]), bare_name(f["partial"])
        if not partial.startswith(PARTIAL_PREFIX):
            raise Fail(f"refusing temp name {partial!r}: expected {PARTIAL_PREFIX}*")
        self.tmp, self.final, self.dst = os.path.join(dst, partial), os.path.join(dst, self.name), dst
        take_over(dst, self.name, partial, self.size, adopt=resumable)  # this node's server may have already
        self.fd = open_held(self.tmp, os.O_RDWR | os.O_CREAT)  # ... and made the file: it follows this one
        self.h, self.done, self.adopted = hashlib.sha256(), 0, 0
        self.label, self.t0, self.last, self.start = "", 0.0, 0.0, 0
        have = os.fstat(self.fd).st_size
        if have and resumable and have <= self.size:  # a crashed run's bytes: the digest will judge them
            while self.done < have:
                self.h.update(data := os.pread(self.fd, min(READ_CHUNK, have - self.done), self.done))
                self.done += len(data)
            self.adopted = have
        elif have:
            self.restart()

    def restart(self) -> None:
        """A new, empty temp file (a server following the old one sees it gone) and a new hash."""
        os.close(self.fd)
        os.unlink(self.tmp)
        self.fd = open_held(self.tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL)
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


class Pulling:
    """What every file of one pull shares: the address connections come from, the timeouts and the floor,
    and the test-only cap on reads of a file source (`rate`)."""

    def __init__(self, req: dict) -> None:
        self.bind = str(req["bind"]) if req.get("bind") else None
        self.stall = float(req.get("stall", 60))
        self.floor, self.window = float(req.get("floor") or 0), float(req.get("window", 30))
        self.bucket = Bucket(req.get("rate"))


def drain(read, r: Receiving, what: str, floor: float, window: float) -> None:
    """read(n) -> up to n bytes, until the file is complete; Fail if the source ends early, or (with a
    `floor`) sends fewer than floor bytes/s over a window."""
    w0, d0 = time.monotonic(), r.done
    while r.done < r.size:
        data = read(min(READ_CHUNK, r.size - r.done))
        if not data:
            raise Fail(f"{what} ended at byte {r.done} of {r.size}")
        r.wrote(data)
        now = time.monotonic()
        if floor and now - w0 >= window:
            rate = (r.done - d0) / (now - w0)
            if rate < floor:
                raise Fail(f"sent {rate:.0f} B/s over {now - w0:.1f} s, under the floor of {floor:.0f} B/s")
            w0, d0 = now, r.done


def _stamp(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def read_file(path: str, r: Receiving, p: Pulling, floor: float, check: bool) -> None:
    """The bytes from r.done on of a file source; with `check`, Changed when a regular file (or what its path
    names) is not the same after the read as before it (size, mtime, ctime, inode). A pipe or a device (a
    stand-in for the NAS in tests) has no such times to go by."""
    fd = os.open(path, os.O_RDONLY)
    try:
        before = _stamp(os.fstat(fd))
        if r.done:
            os.lseek(fd, r.done, os.SEEK_SET)
        drain(lambda n: os.read(fd, p.bucket.take(n)), r, path, floor, p.window)
        after, now = _stamp(os.fstat(fd)), _stamp(os.stat(path))
    finally:
        os.close(fd)
    if check and stat.S_ISREG(before[5]) and not (before == after == now and after[2] == r.size):
        raise Changed(f"{path} changed while it was read (size, mtime, ctime, inode {before} -> {now})")


def fetch(src: dict, r: Receiving, p: Pulling, floor: float, check: bool) -> None:
    """Bytes from r.done to the end from one source into r."""
    if src["kind"] == "file":
        return read_file(absolute(src["path"], "source path"), r, p, floor, check)
    if not src.get("token"):
        raise Fail("no token for this source in the request")
    headers = {TOKEN_HEADER: str(src["token"]), "Range": f"bytes={r.done}-"}
    source = (p.bind, 0) if p.bind else None
    conn = http.client.HTTPConnection(
        src["address"], int(src["port"]), timeout=p.stall, source_address=source
    )
    try:
        conn.request("GET", "/f/" + quote(r.name), headers=headers)
        resp = conn.getresponse()
        size, length = resp.getheader(SIZE_HEADER), resp.getheader("Content-Length")
        if resp.status != (206 if r.done else 200) or (size, length) != (str(r.size), str(r.size - r.done)):
            raise Fail(
                f"answered HTTP {resp.status} {clean(resp.reason, 60)} "
                f"(size {clean(size, 40)}, length {clean(length, 40)})"
            )
        drain(resp.read1, r, "the stream", floor, p.window)  # read1: what the socket has, no waiting for n
    finally:
        conn.close()


def pull_file(dst: str, f: dict, p: Pulling) -> dict:
    """Fetch one file from the first source that works; verified, then renamed into place. A copy made of
    more than one source's bytes (resumed) that fails its digest is fetched once more from byte 0."""
    given = f.get("sha256")
    expected = given or blob_digest(f.get("blob"))
    how = (f.get("digest_of") or "sha256 given") if given else "sha256 = blob name" if expected else None
    sources = list(f["sources"])
    if expected is None and (peers := [s.get("label") for s in sources if s.get("label") != NAS_LABEL]):
        raise Fail(f"{f.get('name')}: no digest known, so it is read from the NAS only, not from {peers}")
    r, tried, t0, retried, i = Receiving(dst, f, expected is not None), [], time.monotonic(), False, 0
    try:
        while i < len(sources):
            src = sources[i]
            label, floor = clean(src.get("label") or src["kind"], 80), p.floor if i < len(sources) - 1 else 0
            r.label, r.t0, r.start = label, time.monotonic(), r.done
            r.progress(force=True)
            bad = False
            try:
                fetch(src, r, p, floor, check=expected is None)
                bad = expected is not None and r.h.hexdigest() != expected
                if bad:
                    raise Fail(f"sha256 {r.h.hexdigest()} of the bytes received, expected {expected}")
            except (Fail, OSError, http.client.HTTPException, ValueError) as e:
                why = clean(e, 300)
                tried.append(f"{label}: {why}")
                emit("fallback", name=r.name, source=label, at=r.done, why=why)
                again = (
                    bad and r.start > 0 and not retried
                )  # the wrong byte may be one an earlier source sent
                if bad or isinstance(e, Changed):
                    r.restart()
                retried, i = retried or again, i + (0 if again else 1)
                continue
            r.place()
            verified = how or "sha256 of this node's NAS read, the file unchanged during the read"
            return {"name": r.name, "bytes": r.size, "seconds": time.monotonic() - t0, "source": label,
                    "sha256": r.h.hexdigest(), "verified": verified, "tried": tried,
                    "adopted": r.adopted}  # fmt: skip
        raise Fail(f"{r.name}: no source worked: " + "; ".join(tried))
    except BaseException:
        r.discard()
        raise


def pull(req: dict) -> dict:
    dst = absolute(req["dst"], "view path")
    os.makedirs(dst, exist_ok=True)
    out, errors, p = {}, [], Pulling(req)

    def one(f: dict) -> None:
        try:
            out[f["name"]] = pull_file(dst, f, p)
        except (Fail, OSError) as e:
            errors.append(clean(e, 2000))

    threads = [threading.Thread(target=one, args=(f,), daemon=True) for f in req["files"]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"files": [out[f["name"]] for f in req["files"] if f["name"] in out], "errors": errors}
