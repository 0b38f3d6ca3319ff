"""What both sides of the fan-out share (docs/fanout.md, "Protocol"): the header names, the JSON lines out,
the checks on names and paths from a request, peer text made printable, and the byte-rate cap. Part of the peer script: `peer.py` lists
its parts, and the controller sends them as one text (labkit/stage/peer_ops.py), so this file imports only the
standard library and its top-level names are unique across the parts.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

PARTIAL_PREFIX = ".labkit-partial."
TOKEN_HEADER, SIZE_HEADER = "X-Labkit-Token", "X-Labkit-Size"
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


def clean(text, limit: int = 200) -> str:
    """Text a peer supplied (a header, a reason phrase, a path) as it may be printed: every character that is
    not printable written as an escape, so no terminal control code gets through; cut to `limit`."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return out if len(out) <= limit else out[:limit] + "..."


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
