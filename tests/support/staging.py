"""Test helpers shared by the staging tests: a shared cache whose read hangs, and a listing of a view as a
node sees it (run there with python3)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.hf_cache import LOCAL, make_cache


def hanging_cache(cache: Path) -> Path:
    """A cache whose first local file is a FIFO: opening it blocks, as a read on a hung NFS mount does."""
    snap = make_cache(cache)
    blob = (snap / LOCAL[0]).resolve()
    blob.unlink()
    os.mkfifo(blob)
    return snap


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
