"""Running the notebook templates (notebooks/*.ipynb) with papermill, the way `labkit run` does.

papermill's own CLI has sharp edges (the output folder must exist, no output path dumps JSON to stdout,
`-p x 007` becomes 7, the kernel's cwd is the caller's); this wrapper fixes the kernel to python3, runs
it from the repo root with that checkout importable, creates the output folder, and marks the
environment as batch so progress bars stay quiet.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from labkit import settings
from labkit.errors import LabkitError
from labkit.progress import BATCH_ENV

KERNEL = "python3"


class NotebookError(LabkitError):
    """A notebook could not be found or failed; names the notebook, cell and error."""


RECORD_MIME = "application/x-labkit+json"


def record(name: str, value: Any) -> None:
    """Inside a notebook: leave a named, JSON-serialisable value in the executed notebook's outputs (a custom
    mimetype, readable later with plain nbformat). `record("run_dir", str(run.path))` makes `labkit run` copy
    the executed notebook into that run folder."""
    from IPython.display import display

    display({RECORD_MIME: {name: value}, "text/plain": f"{name} = {value!r}"}, raw=True)


def show_figure(fig: Any, name: str) -> None:
    """Inside a notebook: show a matplotlib figure as its PNG, with `[plot: name]` as its text, and close it. A
    bare display(fig) also leaves `<Figure size 800x1040 with 4 Axes>` as the text a logged run prints, and
    %matplotlib inline would draw a figure left open a second time at the cell's end."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import display

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight")
    plt.close(fig)
    display({"image/png": buf.getvalue(), "text/plain": f"[plot: {name}]"}, raw=True)


def read_records(notebook: str | os.PathLike) -> dict[str, Any]:
    """Every value record()ed in an executed notebook, later values winning."""
    import nbformat

    nb = nbformat.read(str(notebook), as_version=4)
    out: dict[str, Any] = {}
    for c in nb.cells:
        for o in c.get("outputs", []) if c.cell_type == "code" else []:
            data = o.get("data", {}).get(RECORD_MIME)
            if isinstance(data, dict):
                out.update(data)
    return out


def shown_tables(notebook: str | os.PathLike) -> list[str]:
    """The text of every table an executed notebook displayed as a report.TableView, in order: what
    `labkit run` prints when papermill did not log the cell outputs (on a terminal it shows only its bar)."""
    import nbformat

    from labkit.report import TABLE_MIME

    nb = nbformat.read(str(notebook), as_version=4)
    return [
        "".join(o["data"].get("text/plain", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if TABLE_MIME in o.get("data", {})
    ]


def notebooks_dir() -> Path:
    from labkit.recipe import repo_root

    return repo_root() / "notebooks"


def resolve_notebook(name: str | os.PathLike) -> Path:
    """'bench' -> notebooks/bench.ipynb; an existing path is taken as is."""
    given = Path(name).expanduser()
    if given.is_file():
        return given
    for candidate in (notebooks_dir() / f"{name}.ipynb", notebooks_dir() / str(name)):
        if candidate.is_file():
            return candidate
    have = ", ".join(sorted(p.stem for p in notebooks_dir().glob("*.ipynb"))) or "none"
    raise NotebookError(
        f"no notebook {str(name)!r} (looked for {given} and {notebooks_dir()}/{name}.ipynb); "
        f"templates: {have}"
    )


def guess_value(text: str) -> Any:
    """Like papermill's -p, but a value is converted only if it reads back identically: 'True', 'None', '3',
    '0.5' convert; '007', '1e3', '1_000' stay strings (ids and versions are not numbers)."""
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    for kind in (int, float):
        try:
            value = kind(text)
        except ValueError:
            continue
        if str(value) == text:
            return value
    return text


def default_output(notebook: Path, now: dt.datetime | None = None, folder: str | os.PathLike = "out") -> Path:
    now = now or dt.datetime.now(dt.UTC)
    return Path(folder) / f"{notebook.stem}-{now:%Y%m%dT%H%M%SZ}.ipynb"


@contextlib.contextmanager
def _environ(updates: Mapping[str, str]) -> Iterator[None]:
    """Set variables for the kernel we start (it inherits our environment), restore them afterwards."""
    saved = {k: os.environ.get(k) for k in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class TerminalView:
    """The kernel's stderr as a person at a terminal wants it during `labkit run` (papermill hands it over as
    it arrives): the lab's stage lines (preflight, staging, boot milestones, stored runs) each on its own line,
    and a progress bar's redraws (tqdm's carriage returns: staging bytes and rate, the request bar) rewritten in
    place on one line."""

    def __init__(self, out: Any, width: int = 120):
        self.out = out
        self.width = width
        self.pending = ""  # text after the last line end: a bar being drawn, or a line not yet ended
        self.bar = False  # the terminal's last line is a bar (rewritten in place)
        self.drawn = ""  # that bar's text

    def write(self, text: str) -> int:
        self.pending += text
        while True:
            ends = [i for i in (self.pending.find("\n"), self.pending.find("\r")) if i >= 0]
            if not ends:
                break
            cut = min(ends)
            piece, end = self.pending[:cut], self.pending[cut]
            self.pending = self.pending[cut + 1 :]
            if piece.strip():
                self._show(piece, as_bar=end == "\r")
        if self.pending.strip() and "\r" in text:  # a bar's newest redraw, shown before its line ends
            self._show(self.pending, as_bar=True)
        return len(text)

    def _show(self, piece: str, as_bar: bool) -> None:
        if as_bar:
            drawn = piece.strip()[: self.width]
            if self.bar and drawn == self.drawn:  # the redraw already on the terminal
                return
            self.drawn = drawn
            self.out.write("\r\x1b[K" + drawn)
        else:
            self.out.write(("\r\x1b[K" if self.bar else "") + piece.rstrip() + "\n")
        self.bar = as_bar
        self.out.flush()

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        """The end of the run: a bar left on the terminal's last line gets its line end."""
        if self.pending.strip() and not self.bar:
            self._show(self.pending, as_bar=False)
        if self.bar:
            self.out.write("\n")
            self.bar = False
        self.out.flush()


def execute(
    notebook: str | os.PathLike,
    parameters: Mapping[str, Any] | None = None,
    output: str | os.PathLike | None = None,
    *,
    progress: bool | None = None,
    log_output: bool | None = None,
    cwd: str | os.PathLike | None = None,
    execution_timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    view: TerminalView | None = None,
) -> Path:
    """Execute a template with papermill and return the executed notebook's path.

    `view`: the kernel's stderr goes there as it comes (stage lines and live bars: `labkit run` on a terminal,
    with papermill's cell bar and cell log off, and the kernel's bars redrawn every second).

    The output folder is created; the kernel is python3 started in `cwd` (default: the repo root) with
    the repo root first on PYTHONPATH and LABKIT_BATCH=1, and the caller's checkout's recipes/ and results/
    when it works in another clone (labkit.recipe.checkout). Progress bar only on a TTY; cell output is
    logged when not. A failing cell raises NotebookError (the executed notebook is still written).
    """
    import papermill as pm

    from labkit.recipe import checkout, repo_root

    src = resolve_notebook(notebook)
    out = Path(output) if output else default_output(src)
    out.parent.mkdir(parents=True, exist_ok=True)
    tty = sys.stderr.isatty()
    root = str(repo_root())
    pythonpath = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    # the kernel starts in the installed checkout: the caller's checkout's recipes and results go with it
    work, given = checkout(), settings.current()
    where = {"LABKIT_RECIPES": (given.recipes, "recipes"), "LABKIT_RESULTS": (given.results, "results")}
    found = {k: str(work / sub) for k, (v, sub) in where.items() if not v} if work != repo_root() else {}
    live = {"LABKIT_BAR_SECONDS": "1"} if view is not None else {}
    updates = {BATCH_ENV: "1", "PYTHONPATH": pythonpath, **found, **live, **(env or {})}
    with _environ(updates):
        try:
            pm.execute_notebook(
                str(src),
                str(out),
                parameters=dict(parameters or {}),
                kernel_name=KERNEL,
                cwd=str(cwd) if cwd else root,
                progress_bar=(tty and view is None) if progress is None else progress,
                log_output=(not tty and view is None) if log_output is None else log_output,
                execution_timeout=execution_timeout,
                stderr_file=view,
            )
        except pm.PapermillExecutionError as e:
            _copy_into_run(out, src)  # a failed run keeps the notebook with its traceback
            raise NotebookError(
                f"{src}: cell {e.cell_index} failed: {e.ename}: {e.evalue} "
                f"(executed notebook with the traceback: {out})"
            )
        except Exception as e:  # kernel missing, bad notebook JSON, ...
            if type(e).__name__ == "NoSuchKernel":
                raise NotebookError(
                    f"no Jupyter kernel named {KERNEL!r}: install one into this environment "
                    f"with `{sys.executable} -m ipykernel install --sys-prefix --name python3`"
                )
            raise
        finally:
            if view is not None:
                view.close()
    _copy_into_run(out, src)
    return out


def _copy_into_run(executed: Path, template: Path) -> Path | None:
    """Copy the executed notebook into the run folder the notebook record()ed as run_dir, if any."""
    from labkit.store import ResultsError, attach_file

    try:
        run_dir = read_records(executed).get("run_dir")
    except (OSError, ValueError):
        return None
    if not run_dir:
        return None
    try:
        return attach_file(run_dir, executed, f"{template.stem}.ipynb")
    except (ResultsError, OSError) as e:
        print(f"labkit: could not copy {executed} into {run_dir}: {e}", file=sys.stderr)
        return None
