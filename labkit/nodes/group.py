"""Many nodes at once: a lane's HostGroup, calls run on every node in parallel (one thread each), and the
Host for each node a recipe names."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, cast

from labkit.errors import NodeError
from labkit.nodes.base import Command, Host, HostError, Result
from labkit.nodes.interrupts import interrupts_noted
from labkit.nodes.local import LocalHost
from labkit.nodes.ssh import SshHost, SshOptions
from labkit.recipe import LanePlan

T = TypeVar("T")


class Named(Protocol):
    """What running a call on many nodes at once needs of a host: its node name (a Host; staging's HostLike)."""

    @property
    def name(self) -> str: ...


H = TypeVar("H", bound=Named)


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

    def __iter__(self) -> Iterator[Host]:
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

    def run(
        self,
        cmd: Command | Callable[[Host], Command],
        what: str,
        timeout: float | None = None,
        check: bool = True,
    ) -> dict[str, Result]:
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

    def __init__(self, fn: Callable[[H], T], hosts: Sequence[H]):
        self._outcomes: dict[str, tuple[T | None, BaseException | None]] = {}
        # Own flags, not Thread.is_alive(): on Python 3.11 a join() cut short by Ctrl-C marks the thread stopped.
        self._done = {h.name: threading.Event() for h in hosts}
        for h in hosts:
            threading.Thread(
                target=self._call, args=(fn, h), name=f"labkit-node-{h.name}", daemon=True
            ).start()

    def _call(self, fn: Callable[[H], T], host: H) -> None:
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
        # No call raised, so every value is what fn returned (a T, which may itself admit None).
        return {name: cast(T, value) for name, (value, _) in outcomes.items()}


STOP_AGAIN = 2.0  # seconds between stop attempts on a node whose call has not returned yet


def map_nodes(
    fn: Callable[[H], T],
    hosts: Sequence[H],
    stop: Callable[[H], Any] | None = None,
    *,
    what: str = "the node jobs",
    say: Callable[[str], None] | None = None,
    stop_wait: float = 30.0,
) -> dict[str, tuple[T | None, BaseException | None]]:
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


def _stop_calls(
    calls: NodeCalls[Any],
    hosts: list[H],
    stop: Callable[[H], Any],
    what: str,
    say: Callable[[str], None],
    bound: float,
) -> None:
    """map_nodes after an interrupt: stop the calls still running, wait for them at most `bound` s."""
    pending = calls.pending()
    if not pending:
        return
    say(f"labkit: interrupted: stopping {what} on {', '.join(pending)} (waiting up to {bound:g} s)")
    by_name = {h.name: h for h in hosts}
    stoppers: dict[str, NodeCalls[Any]] = {}
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
                say(
                    f"labkit: still stopping {what} (at most {max(0.0, deadline - time.monotonic()):.0f} s more)"
                )
            pending = calls.pending()
    if pending:
        why = {n: stoppers[n]._outcomes.get(n, (None, None))[1] for n in pending if n in stoppers}
        say(
            f"labkit: {what} did not stop within {bound:g} s on "
            + ", ".join(n + (f" ({_reason(e)})" if (e := why.get(n)) is not None else "") for n in pending)
        )


def _say(text: str) -> None:
    with contextlib.suppress(OSError):  # the terminal went away
        print(text, file=sys.stderr, flush=True)


def each_node(
    hosts: Iterable[H],
    fn: Callable[[H], T],
    what: str,
    stop: Callable[[H], Any] | None = None,
    activity: str = "",
    say: Callable[[str], None] | None = None,
) -> dict[str, T]:
    """{node: fn(host)} run on all nodes at once (map_nodes); one NodeError naming every node that failed,
    each with its own message (a leading "<node>: " is not repeated).

    With `stop` (ends on a node what fn runs there), a Ctrl-C says it stops `activity` (via `say`, default
    stderr), runs stop on every node still running, waits for them (bounded) and is then raised."""
    outcomes = map_nodes(fn, list(hosts), stop, what=activity or what, say=say)
    failures = {}
    for name, (_, err) in outcomes.items():
        if err is not None:
            text = err.message if isinstance(err, HostError) else str(err)
            failures[name] = text.removeprefix(name + ": ")
    if failures:
        raise NodeError(what, failures)
    # No call raised, so every value is what fn returned (a T, which may itself admit None).
    return {name: cast(T, value) for name, (value, _) in outcomes.items()}


def _reason(err: BaseException) -> str:
    if isinstance(err, HostError):
        return err.message
    if isinstance(err, NodeError):
        return str(err)
    return f"{type(err).__name__}: {err}"


def check_reachable(group: HostGroup) -> None:
    """Raise one NodeError naming every node that cannot run a trivial command; nothing is started."""
    group.map(lambda h: h.check(), "unreachable nodes (nothing was started)")


def host_for(
    node: str, user: str | None, port: int, connect_timeout: float, ssh: SshOptions | None = None
) -> Host:
    """A LocalHost for "localhost", else an SshHost with recipe values overridden by `ssh`."""
    if node == "localhost":
        return LocalHost()
    ssh = ssh or SshOptions()
    return SshHost(
        node,
        user=ssh.user or user,
        port=ssh.port or port,
        connect_timeout=ssh.connect_timeout or connect_timeout,
        key_files=ssh.key_files,
        known_hosts=ssh.known_hosts,
        use_agent=ssh.use_agent,
    )


def hosts_for_plan(plan: LanePlan, ssh: SshOptions | None = None) -> HostGroup:
    """The lane's nodes from its cluster section (head first)."""
    c = plan.cluster
    return HostGroup([host_for(n, c.user, c.ssh_port, c.connect_timeout, ssh) for n in c.nodes])
