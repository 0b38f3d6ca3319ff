"""Hosts: the one interface for running commands on a node, whether this machine or one reached over SSH.

One small interface for both kinds of node, so serving and staging code is written once:
    host.run(argv_or_command, timeout=..., stdin=...) -> Result(stdout, stderr, exit_code)
    host.write_file(path, data), host.read_file(path)
A list given as the command is quoted with shlex.join; a string is passed to the node's shell as is
(callers build such strings with shlex.quote on every argument).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labkit.errors import LabkitError

Command = str | Sequence[str]


class HostError(LabkitError):
    """A command could not be run on a node (not: the command ran and exited non-zero)."""

    def __init__(self, node: str, message: str):
        self.node = node
        self.message = message
        super().__init__(f"{node}: {message}")


class Unreachable(HostError):
    """The node cannot be connected to (refused, timed out, auth or host-key failure)."""


class CommandTimeout(HostError):
    """The command did not finish within its timeout."""


@dataclass
class Result:
    node: str
    command: str
    stdout: str
    stderr: str
    exit_code: int

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def check(self, what: str = "") -> Result:
        """Raise HostError (naming node, command, exit code and stderr) unless the command succeeded."""
        if not self.ok:
            detail = (self.stderr.strip() or self.stdout.strip())[-800:]
            label = what or self.command
            raise HostError(
                self.node, f"{label} failed (exit {self.exit_code})" + (f": {detail}" if detail else "")
            )
        return self


def as_command(cmd: Command) -> str:
    """A shell command line: lists are quoted argument by argument, strings pass through unchanged."""
    if isinstance(cmd, str):
        return cmd
    return shlex.join([str(a) for a in cmd])


class Host:
    """A node commands run on. Subclasses implement `_run`, `write_file`, `read_file`."""

    name: str
    address: str

    def run(self, cmd: Command, timeout: float | None = None, stdin: str | bytes | None = None) -> Result:
        command = as_command(cmd)
        return self._run(command, timeout, stdin)

    def _run(self, command: str, timeout: float | None, stdin: str | bytes | None) -> Result:
        raise NotImplementedError

    def run_streaming(
        self,
        cmd: Command,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> Result:
        """`run`, also handing each stdout line to on_line as it arrives (progress of long node jobs).
        This default delivers the lines when the command ends; subclasses stream them live."""
        r = self.run(cmd, timeout=timeout, stdin=stdin)
        if on_line is not None:
            for line in r.stdout.splitlines():
                on_line(line)
        return r

    def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        raise NotImplementedError

    def read_file(self, path: str) -> bytes:
        raise NotImplementedError

    def check(self) -> None:
        """Raise Unreachable unless a trivial command runs on the node."""
        self.run("true", timeout=30).check("reachability check")

    def close(self) -> None:
        pass

    def twin(self) -> Host:
        """A Host for the same node that runs a command while this one is busy with another: how an interrupt
        stops a node job from another thread (an SshHost runs one command at a time). The caller closes it;
        hosts that run commands side by side return themselves."""
        return self

    @property
    def is_local(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
