"""`labkit run` on a terminal shows the lab's own progress (notebooks.TerminalView): preflight, the boot's
milestones, the request bar redrawn in place, the tables at the end; papermill's cell counter and cell log only
with --log-cells. Run on a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from labkit.notebooks import TerminalView
from tests.support.lanes import sim_recipe
from tests.support.results import REPO
from tests.support.workers import free_port


def _on_a_terminal(argv: list[str], env: dict[str, str], cwd: str) -> str:
    """Everything `argv` wrote to a pseudo-terminal of 30 rows and 120 columns, until it exited."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every holder of the terminal's other side has closed it
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=300) == 0, out.decode(errors="replace")[-3000:]
    return out.decode(errors="replace")


def test_labkit_run_on_a_terminal_shows_the_stages_and_a_live_request_bar(tmp_path, local_env):
    recipes = tmp_path / "recipes"
    # slow enough decode that the request bar is redrawn a few times (every second on a terminal)
    sim_recipe(recipes / "ttylane", free_port(18360, 18369), settings={"decode_tps": 40})
    env = {**os.environ, "PYTHONPATH": str(REPO), "LABKIT_RECIPES": str(recipes)}
    env.pop("LABKIT_BATCH", None)
    argv = [sys.executable, "-m", "labkit", "run", "bench", "-p", "recipe", "ttylane"]
    argv += ["-p", "results", str(tmp_path / "results"), "-o", str(tmp_path / "out.ipynb")]
    text = _on_a_terminal(argv, env, str(tmp_path))
    assert "pre-boot checks:" in text  # preflight
    assert "application startup complete" in text and "ready at http://" in text  # the boot's milestones
    assert "\r\x1b[Kbench:" in text  # the request bar, rewritten in place
    assert "Measured lanes" in text and "executed notebook:" in text  # the tables once it is done
    assert "Executing" not in text and "Ending Cell" not in text  # no papermill cell counter, no cell log
    logged = _on_a_terminal(
        argv[:-2] + ["-o", str(tmp_path / "logged.ipynb"), "--log-cells"], env, str(tmp_path)
    )
    assert "Executing notebook with kernel" in logged or "Ending Cell" in logged


def test_the_terminal_view_keeps_lines_and_rewrites_a_bar_in_place():
    class Out:
        text = ""

        def write(self, s: str) -> None:
            self.text += s

        def flush(self) -> None:
            pass

    out = Out()
    view = TerminalView(out)
    for part in (
        "lane x: starting\n",
        "\rbench:  10%| 1/10",
        "\rbench:  50%| 5/",
        "10",
        "\r" + " " * 20,
        "\r",
    ):
        view.write(part)
    view.write("lane x: removed\n")
    view.close()
    assert out.text == (
        "lane x: starting\n"
        "\r\x1b[Kbench:  10%| 1/10"
        "\r\x1b[Kbench:  50%| 5/"  # a partial redraw is shown as it comes
        "\r\x1b[Kbench:  50%| 5/10"
        "\r\x1b[Klane x: removed\n"
    )
