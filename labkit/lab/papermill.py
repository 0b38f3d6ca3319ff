"""Finding the notebook papermill is writing, so the bench notebook can copy itself into its run folder."""

from __future__ import annotations

import os
from pathlib import Path

from labkit import settings
from labkit.lab.runs import LaneRun


def attach_executed_notebook(done: LaneRun) -> Path | None:
    """Copy the notebook papermill is writing into the first run folder (plain `papermill in out` runs).

    `labkit run` copies the finished notebook itself; under a bare papermill CLI the kernel finds the output
    path on its parent's command line. The copy holds every cell up to the one calling this.
    """
    from labkit.store import NOTEBOOK_FILE, attach_file

    if not done.run_dirs or settings.current().batch:
        return None
    out = _papermill_output()
    if out is None or not out.is_file():
        return None
    return attach_file(done.run_dirs[0], out, NOTEBOOK_FILE)


def _papermill_output() -> Path | None:
    try:
        ppid = os.getppid()
        argv = Path(f"/proc/{ppid}/cmdline").read_bytes().split(b"\0")
        cwd = Path(os.readlink(f"/proc/{ppid}/cwd"))
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in argv if a]
    return papermill_output_path(args, cwd)


# papermill CLI options that take values (2 for name + value), to find the positional input/output paths.
_PM_TAKES = {
    "-p": 2,
    "--parameters": 2,
    "-r": 2,
    "--parameters_raw": 2,
    "-f": 1,
    "--parameters_file": 1,
    "-y": 1,
    "--parameters_yaml": 1,
    "-b": 1,
    "--parameters_base64": 1,
    "-k": 1,
    "--kernel": 1,
    "-l": 1,
    "--language": 1,
    "--cwd": 1,
    "--engine": 1,
    "--start-timeout": 1,
    "--execution-timeout": 1,
    "--log-level": 1,
    "--request-save-on-cell-execute": 0,
}


def papermill_output_path(args: list[str], cwd: Path) -> Path | None:
    """The output notebook path of a papermill command line (None for stdout or not papermill)."""
    start = next((i for i, a in enumerate(args) if Path(a).name == "papermill"), None)
    if start is None:
        return None
    positional, i = [], start + 1
    while i < len(args):
        a = args[i]
        if a.startswith("-") and a != "-":
            i += 1 + _PM_TAKES.get(a.split("=", 1)[0], 0) if "=" not in a else 1
            continue
        positional.append(a)
        i += 1
    if len(positional) < 2 or positional[1] == "-":
        return None
    out = Path(positional[1])
    return out if out.is_absolute() else cwd / out
