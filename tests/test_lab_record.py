"""The README's two commands in order, `make bench` then the tests, on a copy of this checkout: the tests that
read the committed lab record pass whatever run `make bench` has added to results/ (issue 36).

CI has just run `make bench` in this checkout (.ci/run sets LABKIT_MADE_BENCH=1): then the copy gets the sim run
it stored (the newest complete one under results/sim/spec-none that git does not hold) instead of storing
another the same way, a minute of the sim lane and its notebook; `labkit report` still runs in the copy.
Without the variable, or without such a run, the copy runs `labkit run bench` itself."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.record import REPO, copy_record, tracked_record
from tests.support.workers import RECIPE_SIM, without_workers

pytestmark = pytest.mark.sim  # `labkit run bench` on the sim lane (the notebook tier is seen by itself)

# the tests that read the lab record: those that request it (tests/support/tiers.py marks them `record`), in
# this test's own tiers (a record test that also boots vLLM reads the same runs as one that does not)
RECORD_ONLY = "record and not (ssh or llamacpp or vllm or docker)"
# one of them, the one `make bench` used to break (issue 36)
BROKE = "tests/report/test_compare.py::test_compare_on_the_stored_sim_lanes_prints_the_correction_it_applied"


def _checkout_copy(dst: Path) -> Path:
    """This checkout's files as they are now (uncommitted edits included) with git's version of results/,
    in a git repository of its own whose index holds them all, as a fresh clone's would."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for rel in sorted({p for p in listed if p and not p.startswith("results/")}):
        src = REPO / rel
        if src.is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)
    copy_record(dst / "results")
    subprocess.run(["git", "init", "-q", str(dst)], check=True)
    subprocess.run(["git", "-C", str(dst), "add", "-A"], check=True)
    return dst


def _record_files() -> list[str]:
    """The test files that name the record's fixtures: collecting only these saves collecting the suite."""
    files = (p for p in (REPO / "tests").rglob("test_*.py") if p != Path(__file__).resolve())
    return sorted(
        str(p.relative_to(REPO)) for p in files if re.search(r"\b(lab|committed)_record\b", p.read_text())
    )


def _made_by_make_bench() -> Path | None:
    """With LABKIT_MADE_BENCH set: the newest complete sim run under this checkout's results/ that git does not
    hold, the one `make bench` stored; otherwise (or without one) None."""
    folder = REPO / "results" / "sim" / "spec-none"
    if not os.environ.get("LABKIT_MADE_BENCH") or not folder.is_dir():
        return None
    tracked = {Path(p).parts[3] for p in tracked_record() if p.startswith("results/sim/spec-none/")}

    def complete(run: Path) -> bool:
        try:
            return json.loads((run / "run.json").read_text())["status"] == "complete"
        except (OSError, ValueError, KeyError):
            return False

    runs = sorted(p for p in folder.iterdir() if p.is_dir() and p.name not in tracked and complete(p))
    return runs[-1] if runs else None


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)


@pytest.mark.xdist_group(RECIPE_SIM)  # the shipped sim recipe's port (tests/support/workers.py)
def test_the_record_tests_pass_after_make_bench_stored_a_run(tmp_path):
    repo = _checkout_copy(tmp_path / "checkout")
    results = repo / "results"
    env = {**os.environ, "PYTHONPATH": str(repo), "LABKIT_RESULTS": str(results)}
    env.pop("LABKIT_BATCH", None)
    before = sorted(p.name for p in (results / "sim" / "spec-none").iterdir())

    made = _made_by_make_bench()
    if made is not None:  # the run CI's `make bench` stored in this checkout
        shutil.copytree(made, results / "sim" / "spec-none" / made.name)
    else:  # what `make bench` runs after `labkit check`
        notebook = str(tmp_path / "out.ipynb")
        bench = _run(
            [sys.executable, "-m", "labkit", "run", "bench", "-p", "recipe", "sim", "-o", notebook], repo, env
        )
        assert bench.returncode == 0, bench.stderr[-3000:]
    report = _run([sys.executable, "-m", "labkit", "report"], repo, env)
    assert report.returncode == 0, report.stderr[-3000:]
    after = sorted(p.name for p in (results / "sim" / "spec-none").iterdir())
    assert len(after) == len(before) + 1  # the record now holds a run the commit does not

    select = ["-m", RECORD_ONLY, *_record_files()]
    pytest = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *select]
    tests = _run(pytest, repo, without_workers(env))
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert f"PASSED {BROKE}" in tests.stdout
