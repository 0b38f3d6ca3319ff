"""Ctrl-C during staging: a real SIGINT to this process while node jobs run ends them on every node, soon.

The copies are slowed with stage(copy_rate=...) (the node script's test-only "rate"): a few MB at 100 kB/s,
so an interrupt that waited for them would come ~36 s late. Node jobs run over real SSH (tests/support/nodes.py)
and on this machine (labkit.nodes.LocalHost); `nodes` is the fixture of tests/stage/conftest.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from labkit.nodes.local import LocalHost
from labkit.stage import stage
from labkit.stage.assess import PARTIAL_PREFIX
from labkit.stage.transport import Timeouts
from tests.support.hf_cache import LOCAL, default_files, make_cache, plan_for
from tests.support.nodes import ADDRESSES
from tests.support.staging import LIST_VIEW, hanging_cache, remote_json

RATE = 100_000  # bytes/s per node copy: the 3.6 MB of local files would take ~36 s
SCRIPT_MARK = "Node side of staging"  # in the command line of every node-script process


class CtrlC:
    """Sends this process a real SIGINT (what Ctrl-C does) from a helper thread once `ready()` holds and
    `settle` s have passed; `sent_at` is when (monotonic)."""

    def __init__(self, ready: Callable[[], bool], settle: float = 1.0, limit: float = 60.0):
        self.sent_at: float | None = None
        self._cancel = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready, settle, limit), daemon=True)

    def __enter__(self) -> CtrlC:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._cancel.set()
        self._thread.join()

    def _run(self, ready: Callable[[], bool], settle: float, limit: float) -> None:
        deadline = time.monotonic() + limit
        while not self._cancel.is_set() and time.monotonic() < deadline:
            if ready():
                if not self._cancel.wait(settle):
                    self.sent_at = time.monotonic()
                    os.kill(os.getpid(), signal.SIGINT)
                return
            self._cancel.wait(0.05)


def local_processes(needle: str) -> list[tuple[int, str]]:
    """Live processes on this machine whose command line contains `needle` (zombies left out)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if needle not in cmd or (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
        except OSError:
            continue
        out.append((int(entry.name), cmd))
    return out


def shown(err: str, text: str) -> bool:
    """`text` begins a line of its own in terminal output (not overdrawn by a progress bar's \\r)."""
    return any(part.startswith(text) for part in re.split(r"[\r\n]", err))


def test_ctrl_c_during_copies_on_four_nodes_stops_them_at_once(nodes, tmp_path, cluster, capsys):
    group, dst = nodes
    make_cache(tmp_path / "nas" / "hub")
    plan = plan_for(tmp_path, tmp_path / "nas" / "hub", dst, list(ADDRESSES))

    def copying() -> bool:
        return (
            len([p for p, cmd in cluster.processes() if SCRIPT_MARK in cmd and ' build {"dst"' in cmd]) == 4
        )

    with CtrlC(copying) as ctrl_c, pytest.raises(KeyboardInterrupt):
        stage(plan, group, progress=True, copy_rate=RATE)
    raised = time.monotonic()
    assert ctrl_c.sent_at is not None, "the copies never ran on all four nodes"
    assert raised - ctrl_c.sent_at < 8, f"the interrupt took {raised - ctrl_c.sent_at:.1f} s"
    err = capsys.readouterr().err
    assert shown(err, "labkit: interrupted: stopping the copy into"), err[-2000:]
    line = next(part for part in re.split(r"[\r\n]", err) if part.startswith("labkit: interrupted"))
    assert all(a in line for a in ADDRESSES), line
    # No node script runs on anywhere once the interrupt is raised.
    assert not [cmd[:100] for _, cmd in cluster.processes() if SCRIPT_MARK in cmd]
    files = default_files()
    for h in group:
        listing = remote_json(h, LIST_VIEW.format(dst=dst))
        for name in LOCAL:  # nothing under a final name but a verified copy (here: nothing at all)
            assert name not in listing or listing[name]["size"] == len(files[name]), (h.name, listing)
        assert not [n for n in listing if n.startswith(PARTIAL_PREFIX)], (h.name, listing)
    report = stage(plan, group, progress=False)
    for addr, node in report.views[0].nodes.items():
        assert node.copied == 2, addr
        listing = remote_json(group.hosts[ADDRESSES.index(addr)], LIST_VIEW.format(dst=dst))
        assert {n: listing[n]["size"] for n in LOCAL} == {n: len(files[n]) for n in LOCAL}
    assert stage(plan, group, progress=False).verification_only


def test_ctrl_c_during_a_local_copy_stops_it_and_the_rerun_ends_correct(tmp_path, capsys):
    cache = tmp_path / "hub"
    make_cache(cache)
    dst = tmp_path / "node-disk" / "view"
    plan = plan_for(tmp_path, cache, str(dst), ["n1"])
    host = LocalHost("n1")
    needle = f'"dst":"{dst}"'

    def copying() -> bool:
        return any(" build {" in cmd for _, cmd in local_processes(needle))

    with CtrlC(copying) as ctrl_c, pytest.raises(KeyboardInterrupt):
        stage(plan, [host], progress=False, copy_rate=RATE)
    raised = time.monotonic()
    assert ctrl_c.sent_at is not None and raised - ctrl_c.sent_at < 8
    assert "labkit: interrupted: stopping the copy into" in capsys.readouterr().err
    assert not local_processes(needle)
    assert not (dst / LOCAL[0]).exists() and not (dst / LOCAL[1]).exists()
    assert not [p for p in dst.iterdir() if p.name.startswith(PARTIAL_PREFIX)]
    report = stage(plan, [host], progress=False)
    assert report.views[0].nodes["n1"].copied == 2
    files = default_files()
    assert all((dst / n).read_bytes() == files[n] for n in LOCAL)
    assert stage(plan, [host], progress=False).verification_only


def test_ctrl_c_during_a_hung_probe_ends_it_without_waiting_for_its_timeout(tmp_path, capsys):
    """A probe blocked on a hung read (a FIFO in the shared cache) is ended by Ctrl-C, not by its 30 s timeout."""
    hanging_cache(tmp_path / "hub")
    dst = tmp_path / "view"
    plan = plan_for(tmp_path, tmp_path / "hub", str(dst), ["n1"])
    needle = str(tmp_path / "hub")

    def probing() -> bool:
        return any(" probe {" in cmd for _, cmd in local_processes(needle))

    with CtrlC(probing, settle=0.5) as ctrl_c, pytest.raises(KeyboardInterrupt):
        stage(plan, [LocalHost("n1")], progress=False, timeouts=Timeouts(node=30.0))
    raised = time.monotonic()
    assert ctrl_c.sent_at is not None and raised - ctrl_c.sent_at < 8
    assert "labkit: interrupted: stopping the staging preflight on n1" in capsys.readouterr().err
    assert not local_processes(needle)
    assert not dst.exists()


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sighup"])
def test_ctrl_c_to_labkit_stage_exits_130_at_once_and_leaves_no_node_job(tmp_path, local_env, how):
    """The CLI as a user runs it, while the preflight hangs on the shared cache: Ctrl-C (SIGINT to its process
    group), a scheduler's SIGTERM or a closed session's SIGHUP to labkit alone."""
    hanging_cache(tmp_path / "hub")
    dst = tmp_path / "view"
    plan_for(tmp_path, tmp_path / "hub", str(dst), ["localhost"])  # writes tmp_path/recipe/recipe.toml
    needle = str(tmp_path / "hub")
    proc = subprocess.Popen(
        [sys.executable, "-m", "labkit", "stage", str(tmp_path / "recipe" / "recipe.toml")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while (
            not any(" probe {" in cmd for _, cmd in local_processes(needle)) and time.monotonic() < deadline
        ):
            time.sleep(0.05)
        time.sleep(0.5)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in its terminal does
        else:
            os.kill(proc.pid, signal.SIGTERM if how == "sigterm" else signal.SIGHUP)
        sent = time.monotonic()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert time.monotonic() - sent < 8 and proc.returncode == 130, err
    assert "labkit: interrupted: stopping the staging preflight on localhost" in err
    assert not local_processes(needle) and not dst.exists()
