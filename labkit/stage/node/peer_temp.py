"""A fan-out run's temp files in the view (docs/fanout.md, "Temp files"): `.labkit-partial.<name>.<run>`.

Every process of a run that has one open holds a shared flock on it for as long as it lives, so a later run
can tell a crashed run's leftover (nobody holds it) from a live run's (locked): before it makes its own temp
file of a name, it removes the leftovers nobody holds, or adopts the largest one's bytes when a digest will
check the whole file at the end. A live run's file is left alone. Part of the peer script (`peer.py`).
"""

from __future__ import annotations

import fcntl
import os

from labkit.stage.node.peer_wire import PARTIAL_PREFIX, emit

RUN_TAG_LEN = 8  # hex digits of a run's id in its temp names (the controller draws it: stage/fanout_run.py)


def hold(fd: int) -> int:
    """Mark `fd`'s file as in use by a live run (a shared lock, released when the process ends)."""
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def open_held(path: str, flags: int) -> int:
    return hold(os.open(path, flags | os.O_NOFOLLOW, 0o644))


def leftovers(folder: str, name: str, own: str) -> list[str]:
    """Temp names of `name` left in `folder` by other runs."""
    stem = f"{PARTIAL_PREFIX}{name}."
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(
        e
        for e in entries
        if e != own
        and e.startswith(stem)
        and len(e) == len(stem) + RUN_TAG_LEN
        and all(c in "0123456789abcdef" for c in e[len(stem) :])
    )


def _unheld(path: str) -> int | None:
    """An fd holding the exclusive lock of `path` when no live process holds it; None when one does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def take_over(folder: str, name: str, own: str, size: int, adopt: bool) -> int:
    """Before this run makes `folder/own` for `name`: every leftover of another run that nobody holds goes,
    except that with `adopt` the largest regular one of at most `size` bytes becomes `own`. Each is an
    event ("leftover"); returns the bytes adopted (0: none)."""
    found = []
    for entry in leftovers(folder, name, own):
        fd = _unheld(os.path.join(folder, entry))
        if fd is None:
            emit("leftover", name=name, path=os.path.join(folder, entry), action="kept: a live run holds it")
            continue
        st = os.fstat(fd)
        fits = adopt and (st.st_mode & 0o170000) == 0o100000 and st.st_size <= size
        found.append((st.st_size if fits else -1, entry, fd))
    found.sort(reverse=True)
    adopted = 0
    for i, (usable, entry, fd) in enumerate(found):
        path = os.path.join(folder, entry)
        try:
            if i == 0 and usable > 0 and not os.path.lexists(os.path.join(folder, own)):
                os.rename(path, os.path.join(folder, own))
                adopted = usable
                emit("leftover", name=name, path=path, action="adopted", bytes=usable)
            else:
                os.unlink(path)
                emit("leftover", name=name, path=path, action="removed")
        finally:
            os.close(fd)
    return adopted
