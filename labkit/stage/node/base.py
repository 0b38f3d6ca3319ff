"""Node side of staging, shared part: constants, sampled blocks, hashing, JSON-line output, path checks.

The modules of labkit/stage/node/ (base, probe, build, main) run on the node as ONE script,
`python3 -I -S -c SCRIPT OP REQUEST_JSON`, joined in that order by labkit.stage.transport.node_script
(which drops their `labkit.*` imports: the names are defined above in the joined text); stdlib only (nodes have sshd,
python3 and coreutils, nothing of labkit). Output is JSON lines on stdout: zero or more
{"event": "progress", ...} while copying, then exactly one {"event": "result", "data": ...} (exit 0) or
{"event": "error", "message": ...} (exit 2).

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

import hashlib
import json
import os
import stat
import sys

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
    """The sampled blocks of `path`, concatenated (a short read means the file changed: Fail)."""
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
