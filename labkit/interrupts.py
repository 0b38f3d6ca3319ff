"""Ctrl-C, SIGTERM and SIGHUP as one thing: an interrupt that runs labkit's cleanup (lane teardown, stopping
node-side staging jobs), and a guard under which that cleanup cannot itself be cut short.

SIGTERM is what a scheduler or `timeout` sends, SIGHUP what closing the SSH or tmux session that runs labkit
sends; by default both kill the process with no cleanup at all. Handlers can only be installed from the main
thread; elsewhere both context managers do nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, turned into an interrupt so the same cleanup runs as for Ctrl-C."""


@contextlib.contextmanager
def ending_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Terminated (a KeyboardInterrupt) inside the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(f"terminated ({signal.Signals(signum).name})")

    old = {sig: signal.signal(sig, handler) for sig in ENDING_SIGNALS}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)


@contextlib.contextmanager
def ignoring_interrupts() -> Iterator[None]:
    """Cleanup must finish: a second Ctrl-C, a SIGTERM or a closed session would otherwise cut it short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, *ENDING_SIGNALS)}
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
