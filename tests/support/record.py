"""The committed lab record as tests see it: a copy of results/ as git's index holds it, never the folder.

`make bench` adds a run under results/sim/ and rewrites results/TABLES.md; a user adds runs of their own.
Tests that read the record must give the same answer either way, so they read git's version of results/
(what the next commit holds: the committed files plus anything staged), copied into a temp folder.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def tracked_record(repo: Path = REPO) -> list[str]:
    """Paths (relative to `repo`) of the files of results/ in git's index; empty when `repo` is no checkout."""
    r = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--", "results"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [p for p in r.stdout.split("\0") if p] if r.returncode == 0 else []


def copy_record(dst: Path, repo: Path = REPO) -> Path:
    """Write git's version of `repo`/results into `dst` (created) and return `dst`.

    The content comes from the index, not the working tree: after `make bench` the working tree's TABLES.md
    counts the new run, which the copy does not hold. Outside a git checkout (an unpacked archive) there is
    no record of what was committed, so the folder is copied as it is."""
    paths = tracked_record(repo)
    if not paths:
        shutil.copytree(repo / "results", dst, ignore=shutil.ignore_patterns("plots"))
        return dst
    stage = dst.parent / f".{dst.name}.checkout"
    subprocess.run(
        ["git", "-C", str(repo), "checkout-index", "-z", "--stdin", f"--prefix={stage}/"],
        input="\0".join(paths),
        text=True,
        check=True,
        capture_output=True,
    )
    (stage / "results").rename(dst)
    stage.rmdir()
    return dst
