"""Node side of staging: the ONE script every node op runs, `python3 -I -S -c SCRIPT OP REQUEST_JSON`.

This file is sent as it is (labkit.stage.transport reads its text), so it is one module, stdlib only (nodes
have sshd, python3 and coreutils, nothing of labkit). Ops: `probe` (a read-only look at the shared cache -
commit, sizes, blob names, sampled blocks - and at the view), `hash` (whole-file hashes for deep verification), `build` (remove,
link, copy), `write` (a small file in the view) and `check` (broken links before launch). Output is JSON
lines on stdout: zero or more {"event": "progress", ...} while copying, then exactly one
{"event": "result", "data": ...} (exit 0) or {"event": "error", "message": ...} (exit 2).

Content checks use SAMPLED BLOCKS: `sample_offsets` below is the documented, fixed set (first block,
last block and evenly spaced blocks in between; the whole file when it is small). Each node compares the
sampled blocks of its copy with the same blocks of the source byte for byte; for each file one node
(`send_source`) returns the raw source blocks (base64) and the controller hashes them with xxhash, which
nodes do not have, for the manifest (raw bytes from one node per file: fabric moves stdout slowly). `full`
mode hashes whole files here, with coreutils `b2sum` (BLAKE2b-512; hashlib's identical blake2b when
b2sum is missing). DEEP verification (`file_hash`) reads a file whole with hashlib in 8 MiB reads and
compares it with the name of the blob its snapshot link resolves to (`blob_of`): the hub names an LFS
blob by its SHA-256 and a git blob by its git SHA-1, so no network and no second read of the NAS is needed
(docs/staging.md, "Deep verification").

Copies are written to `.labkit-partial.<name>` in the view, fsynced, checked against the source
(size, sampled bytes, full digest in full mode) and only then renamed to the final name, so a killed
copy never leaves a partial file under a final name; the next run removes the partial file and redoes it.
A build ended by SIGTERM (an interrupted stage) removes its partial file itself.
"""

from __future__ import annotations

import binascii
import errno
import hashlib
import json
import os
import stat
import sys
import time

# subprocess and shutil are imported where used (full mode, build): every probe pays for each import at the
# start of a fresh interpreter on the node, and base64 (which pulls in `re`) is replaced by binascii.

PARTIAL_PREFIX = ".labkit-partial."
MANIFEST_NAME = ".labkit-view.json"
SAMPLE_BLOCK = 64 * 1024  # bytes per sampled block
SAMPLE_COUNT = 8  # blocks per file (first, last, 6 evenly spaced): 512 KiB read per file
COPY_CHUNK = 256 * 1024 * 1024  # per copy_file_range call; progress lines between calls
HASH_CHUNK = 8 * 1024 * 1024  # per read when hashing whole files (large reads: near sha256sum speed)
HEX = frozenset("0123456789abcdef")
PROGRESS_EVERY = 0.5  # seconds between progress lines


class Fail(Exception):
    """An expected failure reported to the controller as {"event": "error"} (no traceback)."""


def sample_offsets(size: int, block: int = SAMPLE_BLOCK, count: int = SAMPLE_COUNT) -> list:
    """Offsets of the sampled blocks of a file of `size` bytes.

    Files up to block*count bytes are covered whole (consecutive blocks, the last one may be short).
    Larger files: `count` blocks of `block` bytes starting at i*(size-block)//(count-1), i = 0..count-1,
    i.e. the first block, the last block (ending at EOF) and evenly spaced blocks in between.
    """
    if size <= block * count:
        return list(range(0, size, block))
    return [(i * (size - block)) // (count - 1) for i in range(count)]


def block_lengths(size: int, offsets: list, block: int = SAMPLE_BLOCK) -> list:
    return [min(block, size - off) for off in offsets]


def read_samples(path: str, size: int, block: int = SAMPLE_BLOCK, count: int = SAMPLE_COUNT) -> bytes:
    """The sampled blocks of `path`, concatenated (a short read means the file changed: Fail). The blocks read
    leave the page cache again (drop_cache's reason), so a check adds nothing to the node's memory (a file
    with writes not yet on disk keeps those pages: only clean ones are dropped)."""
    out = bytearray()
    fd = os.open(path, os.O_RDONLY)
    try:
        offsets = sample_offsets(size, block, count)
        for off, length in zip(offsets, block_lengths(size, offsets, block)):  # noqa: B905 (python3 < 3.10 on nodes)
            data = os.pread(fd, length, off)
            if len(data) != length:
                raise Fail(f"{path}: short read at offset {off} ({len(data)} of {length} bytes)")
            out += data
    finally:
        if hasattr(os, "posix_fadvise"):  # the whole file: the kernel's readahead went past the blocks read
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    return bytes(out)


def split_blocks(raw: bytes, size: int, block: int, count: int) -> list:
    offsets = sample_offsets(size, block, count)
    out, pos = [], 0
    for n in block_lengths(size, offsets, block):
        out.append(raw[pos : pos + n])
        pos += n
    return out


def full_digest(path: str) -> str:
    """BLAKE2b-512 of the whole file, 'blake2b-512:<hex>' (coreutils b2sum, else hashlib)."""
    import shutil
    import subprocess

    exe = shutil.which("b2sum")
    if exe:
        proc = subprocess.run([exe, "--", path], capture_output=True)
        if proc.returncode != 0:
            raise Fail(f"b2sum {path} failed: {proc.stderr.decode(errors='replace').strip()}")
        return "blake2b-512:" + proc.stdout.split()[0].decode().lstrip("\\")
    h = hashlib.blake2b()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(16 * 1024 * 1024), b""):
            h.update(chunk)
    return "blake2b-512:" + h.hexdigest()


def blob_of(path: str, blobs: str) -> object:
    """The name of the blob `path` (a snapshot entry) resolves to in `blobs` (the repo's blobs/ folder, real
    path), or None when it is not a link into it (a plain file in the snapshot, a hand-made cache)."""
    if not os.path.islink(path):
        return None
    real = os.path.realpath(path)
    return os.path.basename(real) if os.path.dirname(real) == blobs else None


def hash_algo(blob: object) -> object:
    """How a blob name is made: 64 hex digits are an LFS object's SHA-256, 40 a git blob's SHA-1 (of
    "blob <size>\\0" and the bytes); None for any other name."""
    if not isinstance(blob, str) or not set(blob) <= HEX:
        return None
    return {64: "sha256", 40: "git-sha1"}.get(len(blob))


def file_hash(path: str, algo: str) -> dict:
    """{"algo", "hex", "size", "mtime_ns", "ctime_ns"} of the whole file, read in HASH_CHUNK pieces into one
    buffer (hashlib releases the GIL and sees no copies). A file that changes while it is read is a Fail."""
    if algo not in ("sha256", "git-sha1"):
        raise Fail(f"unknown hash {algo!r}; expected sha256 or git-sha1")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise Fail(f"{path} is not a regular file")
        h = hashlib.sha256() if algo == "sha256" else hashlib.sha1(b"blob %d\0" % before.st_size)
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        buf = bytearray(HASH_CHUNK)
        view = memoryview(buf)
        with open(fd, "rb", buffering=0, closefd=False) as f:
            n = f.readinto(buf)
            while n:
                h.update(view[:n])
                n = f.readinto(buf)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    stamp = (before.st_size, before.st_mtime_ns, before.st_ctime_ns)
    if stamp != (after.st_size, after.st_mtime_ns, after.st_ctime_ns):
        raise Fail(f"{path} changed while it was hashed")
    return {"algo": algo, "hex": h.hexdigest(), "size": stamp[0], "mtime_ns": stamp[1], "ctime_ns": stamp[2]}


def emit(event: str, **fields) -> None:
    fields["event"] = event
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def bare_name(name: str) -> str:
    if not isinstance(name, str) or not name or "/" in name or name in (".", "..") or "\0" in name:
        raise Fail(f"refusing file name {name!r}: expected a bare file name")
    return name


def absolute(path: str, what: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or ".." in path.split("/") or "\0" in path:
        raise Fail(f"refusing {what} {path!r}: expected an absolute path without '..'")
    return os.path.normpath(path)


def nearest_existing(path: str) -> str:
    """`path` or its closest existing ancestor (where the view will be created)."""
    p = path
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def entry_state(path: str) -> dict:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return {"state": "missing"}
    if stat.S_ISLNK(st.st_mode):
        return {"state": "link", "target": os.readlink(path), "resolves": os.path.exists(path)}
    if stat.S_ISREG(st.st_mode):  # mtime and ctime: a deep hash on record holds while they stay
        return {
            "state": "file",
            "size": st.st_size,
            "alloc": st.st_blocks * 512,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
        }
    if stat.S_ISDIR(st.st_mode):
        return {"state": "dir"}
    return {"state": "other"}


# ---- probe: a read-only look at the shared cache and the view; hash: whole files, for deep verification


def resolve_commit(repo_cache: str, revision: str) -> tuple:
    """(commit, snapshot dir) for a branch/tag name via refs/<revision>, or a commit hash directly."""
    snapshots = os.path.join(repo_cache, "snapshots")
    if not os.path.isdir(repo_cache):
        raise Fail(f"model not in the shared cache: {repo_cache} does not exist")
    ref = os.path.join(repo_cache, "refs", revision)
    if os.path.isfile(ref):
        with open(ref, encoding="utf-8") as f:
            commit = f.read().strip()
        if not commit or "/" in commit or commit in (".", ".."):
            raise Fail(f"{ref} does not hold a commit hash")
    elif "/" not in revision and os.path.isdir(os.path.join(snapshots, revision)):
        commit = revision
    else:
        raise Fail(
            f"revision {revision!r} not found: {ref} does not exist "
            f"(and there is no {os.path.join(snapshots, revision)})"
        )
    snapshot = os.path.join(snapshots, commit)
    if not os.path.isdir(snapshot):
        raise Fail(f"{ref} names commit {commit}, but {snapshot} does not exist")
    return commit, snapshot


def snapshot_entry(path: str, blobs: str) -> dict:
    """One snapshot entry: a file (size, blob name), a folder (its files by path below the snapshot,
    `tree`), or broken (a dangling link)."""
    try:
        st = os.stat(path)
    except OSError as e:
        return {"kind": "broken", "error": f"{path}: {e.strerror}"}
    if not stat.S_ISDIR(st.st_mode):
        return {"kind": "file", "size": st.st_size, "blob": blob_of(path, blobs)}
    return {"kind": "dir", "tree": {}}


def snapshot_tree(top: str, prefix: str, blobs: str, out: dict) -> dict:
    """Every file below the snapshot folder `top`, keyed by its path below the snapshot ("original/x.json")."""
    for name in sorted(os.listdir(top)):
        path, rel = os.path.join(top, name), f"{prefix}/{name}"
        if os.path.isdir(path) and not os.path.islink(path):
            snapshot_tree(path, rel, blobs, out)
        else:
            out[rel] = snapshot_entry(path, blobs)
    return out


def compare(path: str, src: str, size: int, block: int, count: int, src_blocks=None) -> list:
    """Per sampled block: is it the same in `path` as in `src` (both `size` bytes)?"""
    mine = split_blocks(read_samples(path, size, block, count), size, block, count)
    if src_blocks is None:
        src_blocks = split_blocks(read_samples(src, size, block, count), size, block, count)
    return [a == b for a, b in zip(mine, src_blocks)]  # noqa: B905 (python3 < 3.10 on nodes)


def view_tree(
    top: str, prefix: str, snap_tree: dict, snapshot: str, block: int, count: int, out: dict
) -> dict:
    """Every non-folder entry below a folder of the view (a copy made by hand), compared with the snapshot's
    file of the same path where both are files of one size."""
    for name in sorted(os.listdir(top)):
        path, rel = os.path.join(top, name), f"{prefix}/{name}"
        state = entry_state(path)
        if state["state"] == "dir":
            view_tree(path, rel, snap_tree, snapshot, block, count, out)
            continue
        want = snap_tree.get(rel, {})
        if state["state"] == "file" and want.get("kind") == "file" and want["size"] == state["size"]:
            state["match"] = compare(path, os.path.join(snapshot, rel), state["size"], block, count)
        out[rel] = state
    return out


def read_sources(snapshot: str, entries: dict, req: dict, block: int, count: int, full: bool) -> tuple:
    """({name: size, digest, blob [, samples, full]}, {name: sampled blocks}) of the local files in the cache.

    Raw bytes go back from one node only (the controller hashes them); every node returns a digest of what it
    read, so a node seeing a different source than the others is caught."""
    sources, blocks = {}, {}
    for name in [bare_name(n) for n in req["local"]]:
        e = entries.get(name)
        if e is None or e["kind"] != "file":
            continue  # the controller reports it (names the node, file and snapshot)
        path = os.path.join(snapshot, name)
        raw = read_samples(path, e["size"], block, count)
        blocks[name] = split_blocks(raw, e["size"], block, count)
        src = {
            "size": e["size"],
            "digest": hashlib.blake2b(raw, digest_size=16).hexdigest(),
            "blob": e["blob"],
        }
        if name in req.get("send_source", ()):
            src["samples"] = binascii.b2a_base64(raw, newline=False).decode()
        if full:
            src["full"] = full_digest(path)
        sources[name] = src
    return sources, blocks


def legacy_blobs(manifest: object, repo_cache: str, blobs: str) -> dict:
    """For a manifest of an older labkit (file entries without "blob"): the blob each entry's recorded source
    resolves to, when that snapshot is still in the cache ({name: blob or None})."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    out = {}
    for name, entry in (files if isinstance(files, dict) else {}).items():
        source = entry.get("source") if isinstance(entry, dict) else None
        if not isinstance(source, str) or "blob" in entry:
            continue
        inside = source.startswith(os.path.join(repo_cache, "snapshots") + "/") and ".." not in source.split(
            "/"
        )
        out[name] = blob_of(source, blobs) if inside else None
    return out


def probe(req: dict) -> dict:
    repo_cache = absolute(req["repo_cache"], "shared cache path")
    dst = absolute(req["dst"], "view path")
    local = [bare_name(n) for n in req["local"]]
    block, count, full = int(req["block"]), int(req["count"]), bool(req.get("full"))
    commit, snapshot = resolve_commit(repo_cache, req["revision"])
    blobs = os.path.realpath(os.path.join(repo_cache, "blobs"))

    entries = {}
    for name in sorted(os.listdir(snapshot)):
        entries[name] = snapshot_entry(os.path.join(snapshot, name), blobs)
        if entries[name]["kind"] == "dir":
            snapshot_tree(os.path.join(snapshot, name), name, blobs, entries[name]["tree"])
    sources, source_blocks = read_sources(snapshot, entries, req, block, count, full)

    existing = nearest_existing(dst)
    vfs = os.statvfs(existing)
    out = {
        "node": os.uname().nodename,
        "commit": commit,
        "snapshot": snapshot,
        "entries": entries,
        "sources": sources,
        "free": vfs.f_bavail * vfs.f_frsize,
        "fs_path": existing,
        "fs_dev": os.stat(existing).st_dev,
        "dst_state": "dir" if os.path.isdir(dst) else entry_state(dst)["state"],  # a link to a dir is fine
        "view": {},
        "partials": [],
        "extra": {},
        "manifest": None,
        "legacy_blobs": {},
    }
    if out["dst_state"] == "dir":
        list_view(dst, out, local, source_blocks, block, count, full)
        out["legacy_blobs"] = legacy_blobs(out["manifest"], repo_cache, blobs)
    return out


def list_view(
    dst: str, out: dict, local: list, source_blocks: dict, block: int, count: int, full: bool
) -> None:
    """Each entry of the view, into `out`: partial copies, the manifest, entries of the snapshot (files of the
    source's size compared by sampled blocks, folders file by file) and the rest."""
    entries, snapshot = out["entries"], out["snapshot"]
    for name in sorted(os.listdir(dst)):
        path = os.path.join(dst, name)
        state = entry_state(path)
        want = entries.get(name, {})
        if name.startswith(PARTIAL_PREFIX):
            out["partials"].append({"name": name, "alloc": state.get("alloc", 0)})
        elif name == MANIFEST_NAME:
            try:
                with open(path, encoding="utf-8") as f:
                    out["manifest"] = json.load(f)
            except (OSError, ValueError) as e:
                out["manifest"] = {"unreadable": str(e)}
        elif name not in entries:
            out["extra"][name] = state
        elif state["state"] == "file" and want["kind"] == "file" and want["size"] == state["size"]:
            src = os.path.join(snapshot, name)
            state["match"] = compare(path, src, state["size"], block, count, source_blocks.get(name))
            if full and name in local:
                state["full"] = full_digest(path)
            out["view"][name] = state
        elif state["state"] == "dir" and want["kind"] == "dir" and name not in local:
            state["tree"] = view_tree(path, name, want["tree"], snapshot, block, count, {})
            out["view"][name] = state
        else:
            out["view"][name] = state


def view_rel(rel: str) -> str:
    """A path below the view: bare names joined by '/' (never absolute, never '..')."""
    if not isinstance(rel, str):
        raise Fail(f"refusing path {rel!r} below the view")
    return "/".join(bare_name(part) for part in rel.split("/"))


def hash_files(req: dict) -> dict:
    """Whole-file hashes (`file_hash`) of the view's files `files` [{rel, algo}] and of the cache's files
    `sources` [{path, algo}] (those without a blob name to compare with)."""
    dst = absolute(req["dst"], "view path")
    out: dict = {"files": {}, "sources": {}}
    for item in req.get("files", ()):
        rel = view_rel(item["rel"])
        out["files"][rel] = file_hash(os.path.join(dst, rel), item["algo"])
    for item in req.get("sources", ()):
        path = absolute(item["path"], "source path")
        out["sources"][path] = file_hash(os.path.realpath(path), item["algo"])
    return out


# ---- build: remove what is wrong, link, copy (temp name, fsync, verify, rename)


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


def drop_cache(path: str) -> bool:
    """Ask the kernel to drop a file's pages from the page cache (posix_fadvise DONTNEED: no root needed; only
    clean pages go, so a copy is fsynced first). A large copy otherwise leaves its source and its copy in
    memory, which on a unified-memory node is memory the engine's weights load into (docs/staging.md, "The
    page cache a copy leaves")."""
    if not hasattr(os, "posix_fadvise"):
        return False
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


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
    # after the checks, which read the copy back: the copy's pages and the source's (an NFS client's too)
    entry["cache_dropped"] = size if drop_cache(os.path.join(dst, name)) and drop_cache(src) else 0
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


# ---- write: atomically replace a small file in the view; check: broken links before launch; the entry point


def write(req: dict) -> dict:
    dst = absolute(req["dst"], "view path")
    name = bare_name(req["name"])
    path = os.path.join(dst, name)
    tmp = os.path.join(dst, PARTIAL_PREFIX + name)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(req["text"])
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(dst)
    return {"path": path}


def check(req: dict) -> dict:
    dst = absolute(req["dst"], "view path")
    if not os.path.isdir(dst):
        raise Fail(f"view {dst} does not exist")
    broken, total = [], 0
    for name in sorted(os.listdir(dst)):
        path = os.path.join(dst, name)
        if os.path.islink(path):
            total += 1
            if not os.path.exists(path):
                broken.append({"name": name, "target": os.readlink(path)})
    return {
        "links": total,
        "broken": broken,
        "partials": [n for n in os.listdir(dst) if n.startswith(PARTIAL_PREFIX)],
    }


OPS = {"probe": probe, "hash": hash_files, "build": build, "write": write, "check": check}


def main(argv: list) -> int:
    if len(argv) != 3 or argv[1] not in OPS:
        emit(
            "error",
            message=f"usage: python3 -I -S -c SCRIPT {{{'|'.join(OPS)}}} REQUEST_JSON (got {argv[1:]!r})",
        )
        return 2
    try:
        data = OPS[argv[1]](json.loads(argv[2]))
    except Fail as e:
        emit("error", message=str(e))
        return 2
    except OSError as e:
        emit("error", message=f"{e.filename or ''}: {e.strerror or e}".lstrip(": "))
        return 2
    emit("result", data=data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
