"""A node reached over SSH.

SSH never silently accepts an unknown host key: keys come from ~/.ssh/known_hosts or an explicit
known_hosts file, and an unknown key fails with a clear error naming the node.

An SshHost opens one connection (fabric `Connection`, paramiko underneath) on first use and keeps it until
`close()`, so a lane's check, start, status polls and teardown pay the SSH handshake once per node. Commands
run on their own channel of that connection, read in the calling thread (`_exec`), with TCP_NODELAY set:
per command this costs ~2 ms on loopback instead of ~45 ms (Nagle + delayed ACK) plus ~9 ms (fabric's
per-command threads and 10 ms exit polling).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import os
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labkit import settings
from labkit.errors import LabkitError
from labkit.nodes.base import Command, CommandTimeout, Host, HostError, Result, Unreachable, as_command
from labkit.recipe import Invalid, user_name


@dataclass(frozen=True)
class SshOptions:
    """How to reach SSH nodes. Unset fields fall back to the recipe, then to ssh defaults.

    Environment (for the CLI, read through labkit.settings): LABKIT_SSH_KEY (private key file),
    LABKIT_SSH_KNOWN_HOSTS (known_hosts file), LABKIT_SSH_USER, LABKIT_SSH_PORT.
    """

    user: str | None = None
    port: int | None = None
    key_files: tuple[str, ...] = ()
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    connect_timeout: float | None = None
    use_agent: bool = True

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SshOptions:
        """The LABKIT_SSH_* settings of this process, or of `env` when given."""
        s = settings.current() if env is None else settings.Settings.from_env(env)
        key = s.ssh_key
        if s.ssh_user:  # it reaches ssh's argv like a recipe's cluster.user, so it is checked like one
            try:
                user_name(s.ssh_user, "LABKIT_SSH_USER")
            except Invalid as e:
                raise LabkitError(f"LABKIT_SSH_USER: {e.message}")
        if s.ssh_port and not (s.ssh_port.isdigit() and 0 < int(s.ssh_port) < 65536):
            raise LabkitError(f"LABKIT_SSH_PORT: expected a port number 1-65535, got {s.ssh_port!r}")
        return cls(
            user=s.ssh_user,
            port=int(s.ssh_port) if s.ssh_port else None,
            key_files=(key,) if key else (),
            known_hosts=s.ssh_known_hosts,
            use_agent=not key,
        )


class SshHost(Host):
    """A node reached over SSH; one connection per host, opened on first use, reused until `close()`."""

    def __init__(
        self,
        name: str,
        user: str | None = None,
        port: int = 22,
        connect_timeout: float = 10.0,
        key_files: Sequence[str] = (),
        known_hosts: str | None = None,
        use_agent: bool = True,
    ):
        self.name = name
        self.address = name
        self.user = user
        self.port = port
        self.connect_timeout = connect_timeout
        self.key_files = tuple(key_files)
        self.known_hosts = known_hosts
        self.use_agent = use_agent
        self._cxn: Any = None
        self._lock = threading.Lock()

    def connection(self) -> Any:
        """The open fabric Connection to the node, connected on first use; Unreachable if it cannot be."""
        from fabric import Config, Connection
        from paramiko import RejectPolicy

        if self._cxn is not None:
            return self._cxn
        quiet_paramiko()
        connect_kwargs: dict[str, Any] = {"allow_agent": self.use_agent}
        if self.key_files:
            connect_kwargs["key_filename"] = list(self.key_files)
            connect_kwargs["look_for_keys"] = False
        config = Config(overrides={"load_ssh_configs": False})
        # fabric rounds connect_timeout down to an int; 0 would mean a non-blocking connect.
        cxn = Connection(
            self.name,
            user=self.user or _default_user(),
            port=self.port,
            config=config,
            connect_timeout=max(1, math.ceil(self.connect_timeout)),
            connect_kwargs=connect_kwargs,
        )
        # fabric defaults to AutoAddPolicy (accept any key); labkit only trusts keys it already knows.
        cxn.client.set_missing_host_key_policy(RejectPolicy())
        known = self.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        if os.path.exists(known):
            cxn.client.get_host_keys().load(known)
        sock = None
        try:
            # Our own socket, so Nagle is off before the handshake: paramiko leaves it on, and each small
            # packet then waits out the peer's delayed ACK (40 ms on Linux) — connect took ~70-100 ms instead
            # of ~24 ms on loopback, and every command ~45 ms instead of ~2 ms. OpenSSH's client does the same.
            sock = socket.create_connection((self.name, self.port), timeout=self.connect_timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            cxn.connect_kwargs["sock"] = sock
            cxn.open()
            cxn.transport.set_keepalive(
                15
            )  # a node gone off the network is noticed on a quiet connection too
        except Exception as e:  # paramiko/socket raise many types; all mean "cannot reach"
            if sock is not None:
                sock.close()
            raise Unreachable(
                self.name,
                f"cannot connect to {self.user or _default_user()}@{self.name}:{self.port}: "
                f"{_describe_connect_error(e, known)}",
            )
        self._cxn = cxn
        return cxn

    def _run(
        self,
        command: str,
        timeout: float | None,
        stdin: str | bytes | None,
        on_line: Callable[[str], None] | None = None,
    ) -> Result:
        with self._lock:
            cxn = self.connection()
            remote = command
            net = None
            if timeout is not None:
                # Without a pty the remote command outlives a client-side timeout; `timeout` ends it on the node.
                remote = f"timeout -k 2 {max(1, math.ceil(timeout))} sh -c {shlex.quote(command)}"
                net = timeout + 10  # client-side net for a hung connection
            data = stdin.encode() if isinstance(stdin, str) else stdin
            started = time.monotonic()
            try:
                out, err, code = _exec(cxn.transport, remote, data, net, on_line, self.connect_timeout)
            except _ClientTimeout:
                raise CommandTimeout(self.name, f"command timed out after {timeout:g} s: {command[:200]}")
            except (OSError, EOFError) as e:
                self._drop()
                raise Unreachable(self.name, f"connection lost: {e}")
            except Exception as e:
                if type(e).__module__.startswith("paramiko"):
                    self._drop()
                    raise Unreachable(self.name, f"connection lost: {type(e).__name__}: {e}")
                raise
        if timeout is not None and code in (124, 137) and time.monotonic() - started >= timeout * 0.9:
            raise CommandTimeout(self.name, f"command timed out after {timeout:g} s: {command[:200]}")
        return Result(self.name, command, out, err, code)

    def run_streaming(
        self,
        cmd: Command,
        timeout: float | None = None,
        stdin: str | bytes | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> Result:
        return self._run(as_command(cmd), timeout, stdin, on_line)

    def twin(self) -> SshHost:
        """The same node over a connection of its own (this one's lock is held while a command runs)."""
        return SshHost(
            self.name,
            user=self.user,
            port=self.port,
            connect_timeout=self.connect_timeout,
            key_files=self.key_files,
            known_hosts=self.known_hosts,
            use_agent=self.use_agent,
        )

    def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        payload = data.encode() if isinstance(data, str) else data
        with self._lock:
            cxn = self.connection()
            try:
                sftp = cxn.sftp()
                sftp.putfo(io.BytesIO(payload), path)
                if mode is not None:
                    sftp.chmod(path, mode)
            except OSError as e:
                raise HostError(self.name, f"cannot write {path}: {e}")

    def read_file(self, path: str) -> bytes:
        with self._lock:
            cxn = self.connection()
            buf = io.BytesIO()
            try:
                cxn.sftp().getfo(path, buf)
            except OSError as e:
                raise HostError(self.name, f"cannot read {path}: {e}")
            return buf.getvalue()

    def _drop(self) -> None:
        cxn, self._cxn = self._cxn, None
        if cxn is not None:
            try:
                cxn.close()
            except Exception:
                pass

    def close(self) -> None:
        with self._lock:
            self._drop()


class _ClientTimeout(Exception):
    """The client-side net of `_exec` expired (the node's `timeout` should have ended the command first)."""


def _exec(
    transport: Any,
    command: str,
    stdin: bytes | None,
    timeout: float | None,
    on_line: Callable[[str], None] | None,
    open_timeout: float,
) -> tuple[str, str, int]:
    """Run one command on an open SSH transport: (stdout, stderr, exit code).

    One channel, read in this thread (select on the channel, no sleeps): fabric's runner starts reader
    threads per command and polls for the exit every 10 ms, which cost ~9 ms per command here. stdin, when
    given, is sent from a helper thread (so a node that writes before it reads cannot deadlock us); else
    the command sees end-of-input at once, like `ssh node cmd </dev/null`."""
    ch = transport.open_session(timeout=open_timeout)
    feeder = None
    try:
        ch.exec_command(command)
        if stdin:

            def feed() -> None:
                with contextlib.suppress(OSError, EOFError):
                    ch.sendall(stdin)
                    ch.shutdown_write()

            feeder = threading.Thread(target=feed, name="labkit-ssh-stdin", daemon=True)
            feeder.start()
        else:
            ch.shutdown_write()
        deadline = None if timeout is None else time.monotonic() + timeout
        out, err = bytearray(), bytearray()
        partial = bytearray()

        def take_out(data: bytes) -> None:
            out.extend(data)
            if on_line is not None:
                partial.extend(data)
                *lines, rest = partial.split(b"\n")
                partial[:] = rest
                for line in lines:
                    on_line(line.decode(errors="replace"))

        while True:
            while ch.recv_ready():
                take_out(ch.recv(65536))
            while ch.recv_stderr_ready():
                err.extend(ch.recv_stderr(65536))
            finished = ch.eof_received or ch.closed
            if finished and ch.exit_status_ready():
                if not ch.recv_ready() and not ch.recv_stderr_ready():
                    break
                continue
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise _ClientTimeout()
            wait = 1.0 if left is None else min(left, 1.0)
            if finished:  # the data pipe stays readable after EOF; wait for the exit status instead
                ch.status_event.wait(wait)
            else:
                select.select([ch], [], [], wait)
        if on_line is not None and partial:
            on_line(partial.decode(errors="replace"))
        code = ch.recv_exit_status()
    finally:
        ch.close()
        if feeder is not None:
            feeder.join(1)
    return out.decode(errors="replace"), err.decode(errors="replace"), code


def _default_user() -> str:
    import getpass

    return getpass.getuser()


def _describe_connect_error(e: Exception, known_hosts: str) -> str:
    from paramiko import SSHException

    text = str(e) or type(e).__name__
    if isinstance(e, SSHException) and "not found in known_hosts" in text:
        return (
            f"host key not found in {known_hosts} (labkit does not accept unknown host keys; "
            "add it with ssh-keyscan or connect once with ssh)"
        )
    if isinstance(e, TimeoutError) or "timed out" in text.lower():
        return f"timed out ({text})"
    return f"{type(e).__name__}: {text}"


def quiet_paramiko() -> None:
    """Keep paramiko's log records off stderr. Its transport thread logs a failed handshake ("Exception (client):
    Error reading SSH protocol banner") with tracebacks at ERROR level, which Python prints when no handler is
    set, or the CLI's root handler prints; labkit reports the same failure itself (Unreachable, naming the node),
    so those lines only landed as stray tracebacks above doctor's tables."""
    log = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())
    log.propagate = False
