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
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import NoReturn

ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
Handler = Callable[[int, FrameType | None], object] | signal.Handlers  # what signal.signal installs


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, turned into an interrupt so the same cleanup runs as for Ctrl-C."""


@contextlib.contextmanager
def _handling(signals: Sequence[int], handler: Handler) -> Iterator[None]:
    """`handler` for `signals` inside the block, the previous handlers after it; main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)


def ending_as_interrupt() -> contextlib.AbstractContextManager[None]:
    """SIGTERM and SIGHUP raise Terminated (a KeyboardInterrupt) inside the block."""

    def handler(signum: int, frame: FrameType | None) -> NoReturn:
        raise Terminated(f"terminated ({signal.Signals(signum).name})")

    return _handling(ENDING_SIGNALS, handler)


def ignoring_interrupts() -> contextlib.AbstractContextManager[None]:
    """Cleanup must finish: a second Ctrl-C, a SIGTERM or a closed session would otherwise cut it short."""
    return _handling((signal.SIGINT, *ENDING_SIGNALS), signal.SIG_IGN)


@contextlib.contextmanager
def interrupts_noted(signals: Sequence[int] = (signal.SIGINT,)) -> Iterator[list[int]]:
    """Each of `signals` appends to the yielded list instead of raising (or being ignored): for a wait the
    user may cut short, which checks the list; nothing is raised in the middle of it. Main thread only."""
    noted: list[int] = []
    with _handling(signals, lambda signum, frame: noted.append(signum)):
        yield noted
