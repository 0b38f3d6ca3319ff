"""Progress bars that suit where they run: live bars in a terminal or Jupyter, sparse stderr lines in batch.

Under papermill a widget bar is saved frozen at "0%" and a text bar writes one output per refresh, so
in batch mode (LABKIT_BATCH=1, set by `labkit run`, or a papermill parent process) labkit uses plain
tqdm on stderr with a long refresh interval.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

from labkit import settings

BATCH_ENV = "LABKIT_BATCH"


def _parent_is_papermill() -> bool:
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            return b"papermill" in f.read()
    except OSError:
        return False


def batch_mode() -> bool:
    """True under `labkit run`, papermill, or with LABKIT_BATCH=1; LABKIT_BATCH=0 forces interactive."""
    env = settings.current()
    if env.batch is not None:
        return env.batch.strip().lower() not in ("", "0", "false", "no")
    return env.papermill or _parent_is_papermill()


# a bar in batch mode redraws this seldom (each redraw is a line of the notebook's log), and is this wide: its file
# is a kernel's stream or a log, and the terminal tqdm would ask behind it may have no width at all (a
# pseudo-terminal without a window gives 0 columns, which draws an empty bar)
BATCH_BAR_SECONDS = 30.0
BATCH_BAR_COLUMNS = 100


def bar_interval() -> float:
    """Seconds between redraws of a bar in batch mode: $LABKIT_BAR_SECONDS (`labkit run` on a terminal shows
    the kernel's bars live and sets 1), else BATCH_BAR_SECONDS."""
    given = settings.current().bar_seconds
    try:
        return max(float(given), 0.1) if given else BATCH_BAR_SECONDS
    except ValueError:
        return BATCH_BAR_SECONDS


def progress(iterable: Iterable | None = None, **kw: Any):
    """tqdm over `iterable` (or a manual bar with total=...): tqdm.auto interactively, plain stderr in batch."""
    if batch_mode():
        from tqdm.std import tqdm

        kw.setdefault("mininterval", bar_interval())
        kw.setdefault("ncols", BATCH_BAR_COLUMNS)
        kw.setdefault("file", sys.stderr)
        kw.setdefault("ascii", True)
        return tqdm(iterable, **kw)
    from tqdm.auto import tqdm

    return tqdm(iterable, **kw)
