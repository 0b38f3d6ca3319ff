"""This machine as a node: commands through subprocess and /bin/sh, each in its own process group.

A process group, not a session: a new session is a new scheduler autogroup on Linux, and an engine started by
such a command would compete for CPU as one group against the client measuring it (docs/engines.md,
"Process runtime and scheduler groups")."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

from labkit.nodes.base import Command, CommandTimeout, Host, HostError, Result, as_command


class LocalHost(Host):
    """This machine, through subprocess and /bin/sh."""

    def __init__(self, name: str = "localhost"):
        self.name = name
        self.address = "127.0.0.1"

    @property
    def is_local(self) -> bool:
        return True

    def _run(self, command: str, timeout: float | None, stdin: str | bytes | None) -> Result:
        data = stdin.encode() if isinstance(stdin, str) else stdin
        # Own process group, so a timeout ends the command's children too (as `timeout` does on SSH nodes).
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
        )
        try:
            out, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise CommandTimeout(self.name, f"command timed out after {timeout:g} s: {command[:200]}")
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return Result(
            self.name, command, out.decode(errors="replace"), err.decode(errors="replace"), proc.returncode
        )

    def run_streaming(
        self,
        cmd: Command,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> Result:
        command = as_command(cmd)
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            process_group=0,
        )
        stdout, stderr = proc.stdout, proc.stderr
        assert stdout is not None and stderr is not None  # both are PIPE above
        err: list[bytes] = []
        feeders = [
            threading.Thread(target=lambda: err.append(stderr.read()), daemon=True),
            threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True),
        ]
        for t in feeders:
            t.start()
        expired = threading.Event()

        def kill_group() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

        def expire() -> None:
            expired.set()
            kill_group()

        timer = threading.Timer(timeout, expire) if timeout is not None else None
        if timer is not None:
            timer.start()
        out = []
        try:
            for raw in stdout:
                line = raw.decode(errors="replace")
                out.append(line)
                if on_line is not None:
                    on_line(line.rstrip("\n"))
            proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
            if proc.poll() is None:  # on_line raised, or KeyboardInterrupt: end the command and its children
                kill_group()
                proc.wait()
        for t in feeders:
            t.join()
        if expired.is_set():
            raise CommandTimeout(self.name, f"command timed out after {timeout:g} s: {command[:200]}")
        return Result(
            self.name, command, "".join(out), b"".join(err).decode(errors="replace"), proc.returncode
        )

    def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        p = Path(os.path.expanduser(path))
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            p.chmod(mode)

    def read_file(self, path: str) -> bytes:
        try:
            return Path(os.path.expanduser(path)).read_bytes()
        except OSError as e:
            raise HostError(self.name, f"cannot read {path}: {e.strerror}")


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, OSError):
        pass
