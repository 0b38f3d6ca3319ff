"""The suite holds however it was started: here, from a job that ignores SIGINT (`nohup make test &`)."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.workers import without_workers

ROOT = Path(__file__).resolve().parent.parent
CTRL_C_TEST = (
    "tests/nodes/test_hosts.py::"
    "test_ctrl_c_while_waiting_on_nodes_returns_at_once_and_names_calls_still_running"
)


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def test_ctrl_c_tests_pass_when_the_suite_starts_with_sigint_ignored():
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", CTRL_C_TEST],
        cwd=ROOT,
        env=without_workers(dict(os.environ)),
        preexec_fn=_ignore_sigint,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
