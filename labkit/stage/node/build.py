"""Node op `build`: remove what is wrong, link, copy (temp name, fsync, verify, rename)."""

from __future__ import annotations

import errno
import os
import time

from labkit.stage.node.base import (
    COPY_CHUNK,
    PARTIAL_PREFIX,
    PROGRESS_EVERY,
    Fail,
    absolute,
    bare_name,
    emit,
    entry_state,
    file_hash,
    fsync_dir,
    full_digest,
    read_samples,
)

COPY_METHODS = ("copy_file_range", "sendfile", "read/write")
NO_SPACE = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))


def _copy(src: str, tmp: str, size: int, name: str, method: str = "auto", rate: float = 0) -> tuple:
    """Copy src to a new file tmp (size bytes) and fsync it; returns (method used, seconds).

    `auto` starts with copy_file_range and falls back (sendfile, then buffered read/write) where the
    kernel or filesystem refuses; a named method starts there (for tests and diagnosis).
    `rate` > 0 caps the copy at that many bytes/s (request key "rate"; tests use it for a copy slow
    enough to interrupt, a few MB on a 64 MB test disk). A full disk is a Fail naming the file and sizes."""
    if method == "auto":
        method = "copy_file_range" if hasattr(os, "copy_file_range") else "sendfile"
    elif method not in COPY_METHODS:
        raise Fail(f"unknown copy method {method!r}; expected auto or one of {', '.join(COPY_METHODS)}")
    t0 = time.monotonic()
    last = t0
    fi = os.open(src, os.O_RDONLY)
    fo = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    state = {"method": method, "buf": None}
    done = 0
    try:
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fi, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        emit("progress", name=name, done=0, total=size)
        while done < size:
            n = min(COPY_CHUNK if rate <= 0 else max(64 * 1024, int(rate / 10)), size - done)
            k = _copy_chunk(fi, fo, n, done, state)
            if k == 0:
                raise Fail(
                    f"{src}: source ended at {done} bytes, expected {size} (file changed while copying?)"
                )
            done += k
            if rate > 0:
                time.sleep(max(0.0, t0 + done / rate - time.monotonic()))
            now = time.monotonic()
            if now - last >= PROGRESS_EVERY:
                emit("progress", name=name, done=done, total=size)
                last = now
        os.fsync(fo)
    except OSError as e:
        if e.errno not in NO_SPACE:
            raise
        vfs = os.statvfs(os.path.dirname(tmp))
        raise Fail(
            f"no space left on the filesystem of {os.path.dirname(tmp)} while copying {name} "
            f"({size} bytes) from {src}: {done} bytes written, {vfs.f_bavail * vfs.f_frsize} bytes free there; "
            "the partial copy was removed (did something else fill the disk after the preflight?)"
        )
    finally:
        os.close(fi)
        os.close(fo)
    emit("progress", name=name, done=done, total=size)
    return state["method"], time.monotonic() - t0


def _copy_chunk(fi: int, fo: int, n: int, done: int, state: dict) -> int:
    """Up to n bytes at offset `done`, by state["method"]; a method the kernel refuses gives way to the next."""
    k = None
    if state["method"] == "copy_file_range":
        try:
            k = os.copy_file_range(fi, fo, n, done, done)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
                raise
            state["method"] = "sendfile"
    if k is None and state["method"] == "sendfile":
        try:
            os.lseek(fo, done, os.SEEK_SET)
            k = os.sendfile(fo, fi, done, n)
        except OSError as e:
            if e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                raise
            state["method"] = "read/write"
    if k is None:
        if state["buf"] is None:
            state["buf"] = bytearray(16 * 1024 * 1024)
        view = memoryview(state["buf"])[:n]
        k = os.preadv(fi, [view], done) if hasattr(os, "preadv") else _pread_into(fi, view, done)
        written = 0
        while written < k:
            written += os.pwrite(fo, view[written:k], done + written)
    return k


def _pread_into(fd: int, view: memoryview, offset: int) -> int:
    data = os.pread(fd, len(view), offset)
    view[: len(data)] = data
    return len(data)


def _remove(dst: str, name: str) -> bool:
    """Unlink dst/name; False when there was nothing to remove."""
    path = os.path.join(dst, bare_name(name))
    st = entry_state(path)
    if st["state"] == "missing":
        return False
    if st["state"] == "dir":
        raise Fail(f"{path} is a directory where the view needs a file or link; remove it by hand")
    os.unlink(path)
    return True


def _check_copy(tmp: str, src: str, size: int, block: int, count: int, full: bool) -> tuple:
    """(problem or None, full digest or None) of a finished copy against its source."""
    got = os.stat(tmp).st_size
    if got != size:
        return f"copy has {got} bytes, source {size}", None
    if read_samples(tmp, size, block, count) != read_samples(src, size, block, count):
        return "sampled blocks of the copy differ from the source", None
    if not full:
        return None, None
    digest = full_digest(tmp)
    if digest != full_digest(src):
        return "full hash of the copy differs from the source", digest
    return None, digest


def _check_deep(tmp: str, src: str, expect: dict) -> tuple:
    """(problem or None, hash record) of a finished copy against the blob name it must hash to (deep mode;
    without a blob name, "hex" is None and the source is hashed as well)."""
    got = file_hash(tmp, expect["algo"])
    want = expect.get("hex") or file_hash(os.path.realpath(src), expect["algo"])["hex"]
    if got["hex"] != want:
        return (
            f"{expect['algo']} of the copy is {got['hex']}, expected {want} "
            f"({'the blob name in the shared cache' if expect.get('hex') else 'the source hashed'}): "
            "the source's bytes do not match its name (damaged blob in the shared cache?)"
        ), got
    return None, got


def _exit_on_sigterm() -> None:
    """SIGTERM (how the controller ends an interrupted stage's jobs) raises SystemExit here, so the copy in
    flight is removed on the way out; a second SIGTERM is ignored so that removal finishes."""
    import signal

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


def _link_all(dst: str, items: list) -> int:
    """Each {name, target} as an absolute link (temp name, then rename over what is there); how many changed."""
    linked = 0
    for item in items:
        name, target = bare_name(item["name"]), absolute(item["target"], "link target")
        path = os.path.join(dst, name)
        st = entry_state(path)
        if st["state"] == "link" and st["target"] == target:
            continue
        if st["state"] == "dir":
            raise Fail(f"{path} is a directory where the view needs a link; remove it by hand")
        tmp = os.path.join(dst, PARTIAL_PREFIX + name)
        _remove(dst, PARTIAL_PREFIX + name)
        os.symlink(target, tmp)
        os.replace(tmp, path)
        linked += 1
    return linked


def _copy_one(dst: str, item: dict, req: dict, block: int, count: int, full: bool) -> tuple:
    """One copy, checked before it gets its final name: (copied entry or None, problem or None)."""
    name, src, size = bare_name(item["name"]), absolute(item["src"], "source path"), int(item["size"])
    tmp = os.path.join(dst, PARTIAL_PREFIX + name)
    _remove(dst, PARTIAL_PREFIX + name)
    deep = None
    try:
        method, seconds = _copy(src, tmp, size, name, req.get("method", "auto"), float(req.get("rate", 0)))
        problem, digest = _check_copy(tmp, src, size, block, count, full)
        if problem is None and item.get("expect"):
            problem, deep = _check_deep(tmp, src, item["expect"])
        if problem is None:
            os.replace(tmp, os.path.join(dst, name))
    except BaseException:
        # e.g. ENOSPC, or SIGTERM from an interrupted stage: free the space now (a kill -9 leaves it for
        # the next run)
        _remove(dst, PARTIAL_PREFIX + name)
        raise
    if problem:
        os.unlink(tmp)
        return None, f"{name}: {problem}; the copy was discarded"
    if deep is not None:  # the rename changed ctime: the record holds the final file's times
        st = os.stat(os.path.join(dst, name))
        deep.update(mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)
    entry = {"name": name, "bytes": size, "seconds": seconds, "method": method, "full": digest, "deep": deep}
    return entry, None


def build(req: dict) -> dict:
    _exit_on_sigterm()
    dst = absolute(req["dst"], "view path")
    block, count, full = int(req["block"]), int(req["count"]), bool(req.get("full"))
    os.makedirs(dst, exist_ok=True)
    removed = [name for name in req["remove"] if _remove(dst, name)]
    linked = _link_all(dst, req["link"])
    copied, errors = [], []
    for item in req["copy"]:
        entry, problem = _copy_one(dst, item, req, block, count, full)
        if problem:
            errors.append(problem)
        else:
            copied.append(entry)
    fsync_dir(dst)
    return {"copied": copied, "linked": linked, "removed": removed, "errors": errors}
