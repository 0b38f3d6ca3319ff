"""What `labkit run` shows in the terminal (docs/measurement.md, "Tables in the terminal"): the tables as text,
in papermill's log when stderr is not a terminal and printed after the run when it is, never the
`<pandas.io.formats.style.Styler at 0x…>` placeholders. Real kernel, results in a temp folder."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
import threading
from pathlib import Path

from tests.support.lanes import sim_recipe
from tests.support.results import REPO, make_sim_run
from tests.support.workers import free_port

PORTS = (18520, 18560)  # this file's sim ports: clear of recipes/sim's 18000 and the other tests' ranges
PLACEHOLDERS = ("<pandas.io.formats.style.Styler", "<IPython.core.display.Markdown object>")
DECODE_ROW = re.compile(r"^decode c1 \(t/s\) +\d[\d,.]*", re.MULTILINE)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "LABKIT_RESULTS": str(tmp_path / "results"), **extra}
    env.pop("LABKIT_BATCH", None)
    return env


def _labkit(*args: str) -> list[str]:
    return [sys.executable, "-m", "labkit", "run", *args]


def test_labkit_run_bench_logs_the_measured_table_as_text(tmp_path):
    """`labkit run bench` on a sim lane with stderr captured (as under `make bench | tee` or CI)."""
    sim_recipe(tmp_path / "recipes" / "textsim", port=free_port(*PORTS))
    proc = subprocess.run(
        _labkit("bench", "-p", "recipe", "textsim", "-o", str(tmp_path / "nb" / "bench.ipynb")),
        cwd=tmp_path,
        env=_env(tmp_path, LABKIT_RECIPES=str(tmp_path / "recipes")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = proc.stdout + proc.stderr
    assert not [p for p in PLACEHOLDERS if p in shown], shown[-3000:]
    assert "Measured lanes\n==============" in shown
    [header] = [line for line in shown.splitlines() if line.startswith("measure ")]
    assert header.split() == ["measure", "sim", "test", "lane", "(sim)"]
    assert DECODE_ROW.search(shown), shown[-3000:]
    assert "Columns marked (sim) come from the simulator" in shown  # the table's notes come along
    assert shown.count("Measured lanes\n") == 1  # logged once, not printed again after the run
    assert (tmp_path / "results" / "textsim").is_dir()


def _run_on_a_terminal(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """Run `cmd` with stderr on a pseudo-terminal (as `make bench` at a prompt); (rc, stdout, terminal)."""
    master, slave = pty.openpty()
    seen: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO once every writer has closed the terminal
                return
            if not data:
                return
            seen.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, timeout=600
        )
    finally:
        os.close(slave)
    reader.join(30)
    os.close(master)
    return proc.returncode, proc.stdout.decode(), b"".join(seen).decode(errors="replace")


def test_on_a_terminal_labkit_run_prints_the_tables_after_the_run(tmp_path):
    """papermill shows only its progress bar on a terminal, so `labkit run` prints the displayed tables."""
    res = tmp_path / "results"
    make_sim_run(res, {"decode_c1": 30.1, "decode_c1_cold": 18.2, "prefill_4096": 702.0})
    cmd = _labkit(
        "compare", "-p", "results_dir", str(res), "-p", "plots", "False", "-p", "tables", "measured"
    )
    rc, out, terminal = _run_on_a_terminal(
        cmd + ["-o", str(tmp_path / "nb" / "c.ipynb")], tmp_path, _env(tmp_path)
    )
    assert rc == 0, terminal[-3000:]
    assert not [p for p in PLACEHOLDERS if p in out + terminal]
    assert out.count("Measured lanes\n==============") == 1
    assert DECODE_ROW.search(out) and "30.1 (18.2 cold)" in out
    assert "simulated stock vLLM (sim)" in out.splitlines()[3]  # the header row under the title
    assert out.rstrip().splitlines()[-1] == f"executed notebook: {tmp_path / 'nb' / 'c.ipynb'}"
    # only tables: the notebook's other outputs (the runs DataFrame, whose columns include "variants") stay out
    assert "variants" not in out
