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
from collections.abc import Iterator, Sequence

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


@contextlib.contextmanager
def interrupts_noted(signals: Sequence[int] = (signal.SIGINT,)) -> Iterator[list[int]]:
    """In the main thread: each of `signals` appends to the yielded list instead of raising (or being ignored).

    For a wait the user may cut short: the waiting code checks the list, nothing is raised in the middle of it.
    """
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    noted: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: noted.append(signum)) for sig in signals}
    try:
        yield noted
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
