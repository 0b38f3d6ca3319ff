"""Deep verification speed (issue 17 goal: >= 0.9x `sha256sum` on the same files), measured in one run:

1. the node side's whole-file hash (the `hash` op that `labkit stage --deep` runs on each node, through
   labkit.stage.call_node on a local host) against `sha256sum` of the same copies, both from the page
   cache, alternating, median of --rounds;
2. for scale, one `stage(deep=True)` of the view whose copies have no hash on record yet, and the next one,
   which takes every hash from the manifest (size, mtime and ctime unchanged).

Usage: python benchmarks/deep_verify_speed.py [--mb 1024] [--files 2] [--rounds 3] [--keep]
Writes only to a temp folder (removed at the end unless --keep).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit import stage as staging  # noqa: E402
from labkit.nodes.local import LocalHost
from tests.support.hf_cache import make_cache, plan_for  # noqa: E402

CHUNK = 16 * 1024 * 1024


def log(msg: str) -> None:
    print(msg, flush=True)


def add_big_blob(snap: Path, name: str, size: int) -> None:
    """A file of `size` random bytes in the cache's blobs/ (named by its SHA-256) and its snapshot link,
    written in pieces so that it never sits in memory whole."""
    blobs = snap.parents[1] / "blobs"
    tmp = blobs / f".incoming-{name}"
    h = hashlib.sha256()
    with open(tmp, "wb") as f:
        left = size
        while left:
            piece = os.urandom(min(CHUNK, left))
            h.update(piece)
            f.write(piece)
            left -= len(piece)
    blob = blobs / h.hexdigest()
    tmp.rename(blob)
    (snap / name).symlink_to(os.path.join("..", "..", "blobs", blob.name))


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=1024, help="MiB in total over the copied files")
    ap.add_argument("--files", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    exe = shutil.which("sha256sum")
    if exe is None:
        log("sha256sum not found (coreutils): nothing to compare with")
        return 1
    root = Path(tempfile.mkdtemp(prefix="labkit-deep-bench-"))
    try:
        names = tuple(f"model-{i + 1:05d}-of-{args.files:05d}.safetensors" for i in range(args.files))
        size = args.mb * 1024 * 1024 // args.files
        snap = make_cache(root / "hub", {"config.json": b"{}\n"})
        for name in names:
            add_big_blob(snap, name, size)
        dst = root / "view"
        plan = plan_for(root, root / "hub", str(dst), ["local"], local=names)
        host = LocalHost("local")
        staging.stage(plan, [host], progress=False)  # the copies
        total = size * len(names)
        paths = [str(dst / n) for n in names]
        request = {"dst": str(dst), "files": [{"rel": n, "algo": "sha256"} for n in names], "sources": []}
        want = {n: os.path.basename(os.path.realpath(snap / n)) for n in names}

        def labkit_hash() -> None:
            got = staging.transport.call_node(host, "hash", request)["files"]
            assert {n: got[n]["hex"] for n in names} == want, "labkit's hash differs from the blob names"

        def coreutils() -> None:
            out = subprocess.run([exe, *paths], check=True, capture_output=True, text=True).stdout
            assert sorted(line.split()[0] for line in out.splitlines()) == sorted(want.values())

        labkit_hash()
        coreutils()  # both from the page cache from here on
        ours, theirs = [], []
        for _ in range(args.rounds):
            ours.append(timed(labkit_hash))
            theirs.append(timed(coreutils))
        ours_rate = total / statistics.median(ours) / 1e6
        theirs_rate = total / statistics.median(theirs) / 1e6
        log(
            f"files: {len(names)} x {size / 1e6:.0f} MB on {dst} ({args.rounds} rounds, medians, page cache warm)"
        )
        log(f"labkit deep verify (node op 'hash', hashlib sha256, 8 MiB reads): {ours_rate:8.0f} MB/s")
        log(f"sha256sum ({exe}):{' ' * max(1, 36 - len(exe))}{theirs_rate:8.0f} MB/s")
        ratio = ours_rate / theirs_rate
        log(
            f"ratio labkit / sha256sum: {ratio:.2f}x (goal >= 0.90x): {'OK' if ratio >= 0.9 else 'BELOW GOAL'}"
        )

        first = timed(lambda: staging.stage(plan, [host], progress=False, deep=True))
        report = staging.stage(plan, [host], progress=False, deep=True)
        again = report.seconds
        checks = sorted(set(report.views[0].nodes["local"].verification.values()))
        log(
            f"stage --deep, nothing on record: {first:.2f} s; the next one: {again:.2f} s ({', '.join(checks)})"
        )
        entry = json.loads((dst / ".labkit-view.json").read_text())["files"][names[0]]["deep"]
        log(f"manifest record of {names[0]}: {entry}")
    finally:
        if args.keep:
            log(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
