"""Where recipes and results are found: $LABKIT_RECIPES / $LABKIT_RESULTS, then the nearest folder from the
working directory up that is a labkit checkout (recipes/ and labkit's pyproject.toml), then the installed
checkout; one line on stderr when it is not the installed one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from labkit.recipe import checkout, repo_root
from labkit.store.files import results_root

PYPROJECT = '[project]\nname = "labkit"\nversion = "0.1.0"\n'


def _clone(root: Path) -> Path:
    """A clone the user works in: its own recipes (one renamed) and results."""
    (root / "recipes").mkdir(parents=True)
    shutil.copytree(repo_root() / "recipes" / "sim", root / "recipes" / "clonesim")
    (root / "results").mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "notes" / "deep").mkdir(parents=True)
    return root


def _labkit(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in ("LABKIT_RECIPES", "LABKIT_RESULTS")}
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env={**clean, "PYTHONPATH": str(repo_root()), **(env or {})},
    )


def test_the_working_directorys_checkout_is_found_from_any_folder_inside_it(tmp_path, monkeypatch):
    clone = _clone(tmp_path / "clone")
    monkeypatch.delenv("LABKIT_RESULTS", raising=False)
    assert checkout(clone / "notes" / "deep") == clone.resolve()
    assert checkout(tmp_path) == repo_root()  # outside any checkout: the installed one
    monkeypatch.chdir(clone / "notes")
    assert results_root() == clone.resolve() / "results"
    other = _clone(tmp_path / "other")
    (other / "pyproject.toml").write_text('[project]\nname = "something-else"\n')
    assert checkout(other) == repo_root()  # another project's pyproject.toml is no labkit checkout


def test_the_cli_uses_the_clones_recipes_and_says_so_once(tmp_path):
    clone = _clone(tmp_path / "clone")
    inside = _labkit("recipes", cwd=clone / "notes" / "deep")
    assert inside.returncode == 0, inside.stderr
    assert "clonesim" in inside.stdout
    lines = [line for line in inside.stderr.splitlines() if "checkout at" in line]
    assert lines == [
        f"labkit: recipes and results of the checkout at {clone.resolve()} (the working directory's), "
        f"not {repo_root()}"
    ]
    outside = _labkit("recipes", cwd=tmp_path)
    assert (
        outside.returncode == 0 and "clonesim" not in outside.stdout and "checkout at" not in outside.stderr
    )
    given = _labkit(
        "recipes",
        cwd=clone,
        env={"LABKIT_RECIPES": str(repo_root() / "recipes"), "LABKIT_RESULTS": str(tmp_path / "r")},
    )
    assert given.returncode == 0 and "clonesim" not in given.stdout and "checkout at" not in given.stderr
