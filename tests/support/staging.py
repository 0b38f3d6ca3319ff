"""Test helpers shared by the staging tests: a shared cache whose read hangs, and a listing of a view as a
node sees it (run there with python3)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from labkit.stage.node.script import SAMPLE_BLOCK, sample_offsets
from tests.support.hf_cache import LOCAL, make_cache


def hanging_cache(cache: Path) -> Path:
    """A cache whose first local file is a FIFO: opening it blocks, as a read on a hung NFS mount does."""
    snap = make_cache(cache)
    blob = (snap / LOCAL[0]).resolve()
    blob.unlink()
    os.mkfifo(blob)
    return snap


def gap_between_samples(size: int) -> tuple[int, int]:
    """(start, end) of the bytes between the 4th and 5th sampled blocks of a `size`-byte file: a change there is
    invisible to the sampled check (labkit.stage.sample_offsets)."""
    offs = sample_offsets(size)
    start, end = offs[3] + SAMPLE_BLOCK, offs[4]
    assert end - start > 1024, f"a {size}-byte file has no gap between its sampled blocks"
    return start, end


def differ_between_samples(data: bytes, length: int = 64 * 1024) -> bytes:
    """`data` with `length` bytes (at most the gap) inverted between two sampled blocks: same size, same
    sampled blocks, other content (another blob)."""
    start, end = gap_between_samples(len(data))
    length = min(length, end - start)
    mid = start + (end - start - length) // 2
    return data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + length]) + data[mid + length :]


def remote_json(host, code: str) -> dict:
    """Run `code` with the node's python3 and parse what it prints as JSON."""
    r = host.run(["python3", "-c", code])
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)


# {name: {"link": target or None, "size", "ok": resolves}} of every entry in the view; .format(dst=...)
LIST_VIEW = """
import json, os, sys
d = sys.argv[1] if len(sys.argv) > 1 else {dst!r}
out = {{}}
for n in sorted(os.listdir(d)):
    p = os.path.join(d, n)
    out[n] = {{"link": os.readlink(p) if os.path.islink(p) else None, "size": os.path.getsize(p),
              "ok": os.path.exists(p)}}
print(json.dumps(out))
"""


def run_stage(plan, hosts, **kw):
    """labkit.stage.stage without progress output, as the staging tests call it."""
    from labkit.stage import stage

    return stage(plan, hosts, progress=False, **kw)
