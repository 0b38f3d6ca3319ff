"""Hosts: run commands on a node (this machine or one reached over SSH) and on many nodes at once.

One small interface for both kinds of node, so serving and staging code is written once:
    host.run(argv_or_command, timeout=..., stdin=...) -> Result(stdout, stderr, exit_code)
    host.write_file(path, data), host.read_file(path)
A list given as the command is quoted with shlex.join; a string is passed to the node's shell as is
(callers build such strings with shlex.quote on every argument).

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
import math
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from labkit.errors import LabkitError, NodeError
from labkit.nodes.interrupts import interrupts_noted

T = TypeVar("T")
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
            raise HostError(self.node, f"{label} failed (exit {self.exit_code})" + (f": {detail}" if detail else ""))
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

    def run_streaming(self, cmd: Command, timeout: float | None = None, stdin: str | bytes | None = None,
                      on_line: Callable[[str], None] | None = None) -> Result:
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
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE if data is not None else
                                subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
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
        return Result(self.name, command, out.decode(errors="replace"), err.decode(errors="replace"), proc.returncode)

    def run_streaming(self, cmd: Command, timeout: float | None = None, stdin: str | bytes | None = None,
                      on_line: Callable[[str], None] | None = None) -> Result:
        command = as_command(cmd)
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        proc = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True)
        err: list[bytes] = []
        feeders = [threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True),
                   threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True)]
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
            for raw in proc.stdout:
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
        return Result(self.name, command, "".join(out), b"".join(err).decode(errors="replace"), proc.returncode)

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


@dataclass(frozen=True)
class SshOptions:
    """How to reach SSH nodes. Unset fields fall back to the recipe, then to ssh defaults.

    Environment (for the CLI): LABKIT_SSH_KEY (private key file), LABKIT_SSH_KNOWN_HOSTS (known_hosts file),
    LABKIT_SSH_USER, LABKIT_SSH_PORT.
    """

    user: str | None = None
    port: int | None = None
    key_files: tuple[str, ...] = ()
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    connect_timeout: float | None = None
    use_agent: bool = True

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> SshOptions:
        env = dict(os.environ if env is None else env)
        key = env.get("LABKIT_SSH_KEY")
        port = env.get("LABKIT_SSH_PORT")
        return cls(user=env.get("LABKIT_SSH_USER") or None, port=int(port) if port else None,
                   key_files=(key,) if key else (), known_hosts=env.get("LABKIT_SSH_KNOWN_HOSTS") or None,
                   use_agent=not key)


class SshHost(Host):
    """A node reached over SSH; one connection per host, opened on first use, reused until `close()`."""

    def __init__(self, name: str, user: str | None = None, port: int = 22, connect_timeout: float = 10.0,
                 key_files: Sequence[str] = (), known_hosts: str | None = None, use_agent: bool = True):
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

    def _connection(self):
        from fabric import Config, Connection
        from paramiko import RejectPolicy

        if self._cxn is not None:
            return self._cxn
        connect_kwargs: dict[str, Any] = {"allow_agent": self.use_agent}
        if self.key_files:
            connect_kwargs["key_filename"] = list(self.key_files)
            connect_kwargs["look_for_keys"] = False
        config = Config(overrides={"load_ssh_configs": False})
        # fabric rounds connect_timeout down to an int; 0 would mean a non-blocking connect.
        cxn = Connection(self.name, user=self.user or _default_user(), port=self.port, config=config,
                         connect_timeout=max(1, math.ceil(self.connect_timeout)), connect_kwargs=connect_kwargs)
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
            cxn.transport.set_keepalive(15)  # a node gone off the network is noticed on a quiet connection too
        except Exception as e:  # paramiko/socket raise many types; all mean "cannot reach"
            if sock is not None:
                sock.close()
            raise Unreachable(self.name, f"cannot connect to {self.user or _default_user()}@{self.name}:{self.port}: "
                              f"{_describe_connect_error(e, known)}")
        self._cxn = cxn
        return cxn

    def _run(self, command: str, timeout: float | None, stdin: str | bytes | None,
             on_line: Callable[[str], None] | None = None) -> Result:
        with self._lock:
            cxn = self._connection()
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

    def run_streaming(self, cmd: Command, timeout: float | None = None, stdin: str | bytes | None = None,
                      on_line: Callable[[str], None] | None = None) -> Result:
        return self._run(as_command(cmd), timeout, stdin, on_line)

    def twin(self) -> SshHost:
        """The same node over a connection of its own (this one's lock is held while a command runs)."""
        return SshHost(self.name, user=self.user, port=self.port, connect_timeout=self.connect_timeout,
                       key_files=self.key_files, known_hosts=self.known_hosts, use_agent=self.use_agent)

    def write_file(self, path: str, data: str | bytes, mode: int | None = None) -> None:
        payload = data.encode() if isinstance(data, str) else data
        with self._lock:
            cxn = self._connection()
            try:
                sftp = cxn.sftp()
                sftp.putfo(io.BytesIO(payload), path)
                if mode is not None:
                    sftp.chmod(path, mode)
            except OSError as e:
                raise HostError(self.name, f"cannot write {path}: {e}")

    def read_file(self, path: str) -> bytes:
        with self._lock:
            cxn = self._connection()
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


def _feed(pipe, data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except (BrokenPipeError, OSError):
        pass


class _ClientTimeout(Exception):
    """The client-side net of `_exec` expired (the node's `timeout` should have ended the command first)."""


def _exec(transport: Any, command: str, stdin: bytes | None, timeout: float | None,
          on_line: Callable[[str], None] | None, open_timeout: float) -> tuple[str, str, int]:
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
        return (f"host key not found in {known_hosts} (labkit does not accept unknown host keys; "
                "add it with ssh-keyscan or connect once with ssh)")
    if isinstance(e, TimeoutError) or "timed out" in text.lower():
        return f"timed out ({text})"
    return f"{type(e).__name__}: {text}"


@dataclass
class HostGroup:
    """The nodes of one lane; `map` runs a function on every node at once (one thread each)."""

    hosts: list[Host]

    @property
    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    @property
    def head(self) -> Host:
        return self.hosts[0]

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self) -> int:
        return len(self.hosts)

    def map(self, fn: Callable[[Host], T], what: str, hosts: Sequence[Host] | None = None) -> dict[str, T]:
        """{node: fn(host)} for all nodes in parallel; NodeError naming every node whose fn raised.

        A Ctrl-C is raised at once; calls in flight finish in the background (see NodeCalls)."""
        return self.begin(fn, hosts).results(what)

    def begin(self, fn: Callable[[Host], T], hosts: Sequence[Host] | None = None) -> NodeCalls[T]:
        """fn(host) started on every node at once; the handle waits for them and names any still running."""
        return NodeCalls(fn, list(self.hosts if hosts is None else hosts))

    def run(self, cmd: Command | Callable[[Host], Command], what: str, timeout: float | None = None,
            check: bool = True) -> dict[str, Result]:
        """Run one command (or a per-host command) on every node; with `check`, non-zero exits are failures."""

        def one(host: Host) -> Result:
            r = host.run(cmd(host) if callable(cmd) else cmd, timeout=timeout)
            return r.check(what) if check else r

        return self.map(one, what)

    def close(self) -> None:
        for h in self.hosts:
            h.close()


class NodeCalls(Generic[T]):
    """fn(host) running on several hosts at once, one daemon thread each, begun on construction.

    A Ctrl-C while waiting ends the wait at once, not the calls: a command already sent to a node cannot be
    recalled (an SSH channel closed under it does not stop it), so it runs on until it returns. `pending()`
    names those; the caller cleans up, then `wait(bound)` for them and undoes what they did once they returned.
    """

    def __init__(self, fn: Callable[[Host], T], hosts: Sequence[Host]):
        self._outcomes: dict[str, tuple[T | None, BaseException | None]] = {}
        # Own flags, not Thread.is_alive(): on Python 3.11 a join() cut short by Ctrl-C marks the thread stopped.
        self._done = {h.name: threading.Event() for h in hosts}
        for h in hosts:
            threading.Thread(target=self._call, args=(fn, h), name=f"labkit-node-{h.name}", daemon=True).start()

    def _call(self, fn: Callable[[Host], T], host: Host) -> None:
        try:
            self._outcomes[host.name] = (fn(host), None)
        except BaseException as e:  # kept for the waiting thread; a thread cannot raise into another
            self._outcomes[host.name] = (None, e)
        finally:
            self._done[host.name].set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every call has returned, at most `timeout` s in all (None: no bound); True if all have."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for done in self._done.values():
            done.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self.pending()

    def pending(self) -> list[str]:
        """Nodes whose call has not returned yet."""
        return [name for name, done in self._done.items() if not done.is_set()]

    def outcomes(self) -> dict[str, tuple[T | None, BaseException | None]]:
        """{node: (value, None) or (None, error)} once all returned; a non-Exception (SystemExit ...) is re-raised."""
        self.wait()
        out = {name: self._outcomes[name] for name in self._done}
        for _, err in out.values():
            if err is not None and not isinstance(err, Exception):
                raise err
        return out

    def results(self, what: str) -> dict[str, T]:
        """{node: value} once all returned; NodeError naming every node whose call raised."""
        outcomes = self.outcomes()
        failures = {name: _reason(err) for name, (_, err) in outcomes.items() if err is not None}
        if failures:
            raise NodeError(what, failures)
        return {name: value for name, (value, _) in outcomes.items()}


STOP_AGAIN = 2.0  # seconds between stop attempts on a node whose call has not returned yet


def map_nodes(fn: Callable[[Host], T], hosts: Sequence[Host], stop: Callable[[Host], Any] | None = None, *,
              what: str = "the node jobs", say: Callable[[str], None] | None = None,
              stop_wait: float = 30.0) -> dict[str, tuple[T | None, BaseException | None]]:
    """{node: (value, None) or (None, error)} with every node run in its own thread; raises only an interrupt.

    Unlike HostGroup.map, an interrupt (Ctrl-C; anything raised in the waiting thread) is raised only once the
    calls returned: staging relies on none of its node jobs running on once its caller has gone.
    Without `stop`, it waits for every call (a second Ctrl-C ends the wait). With `stop` - stop(host) ends on
    that node what this map's call there runs - it says (`say`, default stderr) which nodes it stops and
    `what`, runs stop on each node whose call has not returned (again every STOP_AGAIN s while it has not),
    waits at most `stop_wait` s for the calls, with further Ctrl-Cs noted but not obeyed (they would cut the
    stopping short), names any node still running then, and raises the interrupt.
    """
    calls = NodeCalls(fn, hosts)
    try:
        calls.wait()
    except BaseException:
        if stop is None:
            calls.wait()
        else:
            _stop_calls(calls, list(hosts), stop, what, say or _say, stop_wait)
        raise
    return calls.outcomes()


def _stop_calls(calls: NodeCalls, hosts: list[Host], stop: Callable[[Host], Any], what: str,
                say: Callable[[str], None], bound: float) -> None:
    """map_nodes after an interrupt: stop the calls still running, wait for them at most `bound` s."""
    pending = calls.pending()
    if not pending:
        return
    say(f"labkit: interrupted: stopping {what} on {', '.join(pending)} (waiting up to {bound:g} s)")
    by_name = {h.name: h for h in hosts}
    stoppers: dict[str, NodeCalls] = {}
    deadline = time.monotonic() + bound
    with interrupts_noted() as noted:
        told = 0
        while pending and time.monotonic() < deadline:
            for name in pending:
                if name not in stoppers or not stoppers[name].pending():
                    stoppers[name] = NodeCalls(stop, [by_name[name]])
            calls.wait(min(STOP_AGAIN, max(0.0, deadline - time.monotonic())))
            if len(noted) > told:
                told = len(noted)
                say(f"labkit: still stopping {what} (at most {max(0.0, deadline - time.monotonic()):.0f} s more)")
            pending = calls.pending()
    if pending:
        why = {n: stoppers[n]._outcomes.get(n, (None, None))[1] for n in pending if n in stoppers}
        say(f"labkit: {what} did not stop within {bound:g} s on " + ", ".join(
            n + (f" ({_reason(why[n])})" if why.get(n) is not None else "") for n in pending))


def _say(text: str) -> None:
    with contextlib.suppress(OSError):  # the terminal went away
        print(text, file=sys.stderr, flush=True)


def _reason(err: BaseException) -> str:
    if isinstance(err, HostError):
        return err.message
    if isinstance(err, NodeError):
        return str(err)
    return f"{type(err).__name__}: {err}"


def check_reachable(group: HostGroup) -> None:
    """Raise one NodeError naming every node that cannot run a trivial command; nothing is started."""
    group.map(lambda h: h.check(), "unreachable nodes (nothing was started)")


def host_for(node: str, user: str | None, port: int, connect_timeout: float, ssh: SshOptions | None = None) -> Host:
    """A LocalHost for "localhost", else an SshHost with recipe values overridden by `ssh`."""
    if node == "localhost":
        return LocalHost()
    ssh = ssh or SshOptions()
    return SshHost(node, user=ssh.user or user, port=ssh.port or port,
                   connect_timeout=ssh.connect_timeout or connect_timeout, key_files=ssh.key_files,
                   known_hosts=ssh.known_hosts, use_agent=ssh.use_agent)


def hosts_for_plan(plan, ssh: SshOptions | None = None) -> HostGroup:
    """The lane's nodes from its cluster section (head first)."""
    c = plan.cluster
    return HostGroup([host_for(n, c.user, c.ssh_port, c.connect_timeout, ssh) for n in c.nodes])
