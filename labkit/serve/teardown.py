"""Teardown: remove the lane on every node and verify it, whatever failed or interrupted on the way.

Everything here runs with Ctrl-C/SIGTERM/SIGHUP ignored or noted, never cut short: saving the logs first is
best-effort, and a start command still running on a node (it cannot be recalled) is waited for, so what it
starts is removed too. The functions take the `Lane` (labkit.serve.lane) whose lane they remove.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from labkit.errors import LabkitError, NodeError
from labkit.nodes import Host, HostError, HostGroup, ignoring_interrupts, interrupts_noted, map_nodes
from labkit.serve.errors import LOG_TAIL_LINES, LaneFailed
from labkit.serve.runtimes import ALIVE
from labkit.serve.watch import INTERRUPTS

T = TypeVar("T")


def down(lane) -> None:
    """Remove the lane on every node and verify nothing is left; NodeError names any node that kept some.

    All of it runs with Ctrl-C/SIGTERM/SIGHUP ignored. Saving the logs first is best-effort: a full disk,
    a broken run folder or an unreachable node there never keeps the stop commands from running.
    """
    t = time.monotonic()
    with ignoring_interrupts():
        try:
            best_effort(lane, "saving the lane's logs before removal", lane.capture_logs)
        finally:
            failures: dict[str, str] = {}
            try:  # on every node at once; a node that fails is named below, after the check of all
                lane.group.run(
                    lambda h: lane.runtime.stop_command(h.name),
                    f"removing lane {lane.lane_id}",
                    timeout=lane.runtime.stop_grace + 60,
                )
            except NodeError as e:
                failures = e.failures
            try:
                left = lane.leftovers()
            except NodeError as e:
                left = e.failures
    lane.timings["down"] = time.monotonic() - t
    problems = dict(failures)  # a node may both fail its stop command and keep something: say both
    for node, what in left.items():
        problems[node] = f"{problems[node]}; left: {what}" if node in problems else what
    if problems:
        raise NodeError(f"lane {lane.lane_id} still present after removal", problems)


def capture_logs(lane) -> None:
    """Fetch the rest of every node's log into the run folder before removal (nothing lost).

    Each node's log is first taken over from the boot watcher, so no text is fetched and saved twice. A node
    whose boot poll has not returned (a slow node after an interrupt) is skipped and named: that poll saves
    what it fetched when it returns; what the node logs after that is not saved.
    """
    if not lane.run_dir or not lane.watched:
        return
    hosts, busy = [], []
    for h in lane.group:
        w = lane.watched[h.name]
        if w.lock.acquire(blocking=False):
            w.closed = True
            w.lock.release()
            hosts.append(h)
        else:
            busy.append(h.name)
    if busy:
        lane.say(
            f"not saving the rest of the log of {', '.join(busy)}: the boot's node poll there has not "
            "returned (it saves what it fetched when it does)"
        )

    def fetch(h: Host) -> str:
        return h.run(lane.runtime.logs_command(h.name, offset=lane.watched[h.name].offset), timeout=60).stdout

    for name, (text, err) in map_nodes(fetch, hosts).items():
        if err is None and text:
            w = lane.watched[name]
            w.offset += len(text.encode())
            with open(lane.run_dir / "logs" / f"{name}.log", "a", encoding="utf-8") as f:
                f.write(text)


def dead_node_report(lane, attempts: int = 4) -> LaneFailed | None:
    """After an error inside `with lane.up()`: name a node that died, with its log tail, if one did."""
    dead: list[str] = []
    for attempt in range(
        attempts
    ):  # a client can see the connection drop a moment before the process is gone
        try:
            states = lane.status()
        except (LabkitError, HostError):
            return None
        dead = [n for n, s in states.items() if s != ALIVE]
        if dead:
            break
        if attempt < attempts - 1:
            time.sleep(0.3)
    if not dead:
        return None
    try:
        tails = lane.logs(tail=LOG_TAIL_LINES, nodes=dead)
    except LabkitError:
        tails = {}
    lines = [f"lane {lane.lane_id}: engine died on {', '.join(dead)} while in use"]
    for n in dead:
        lines.append(f"  last lines of {n}'s log:")
        lines += ["    | " + s for s in tails.get(n, "").rstrip("\n").splitlines()]
    lines.append("  (everything the lane started has been removed)")
    return LaneFailed("\n".join(lines))


def remove_after_failed_start(lane) -> None:
    """Teardown for start(); when it was cut short (Ctrl-C) while start commands ran, also wait for those.

    A start command sent to a node cannot be recalled; one that returned after the teardown (`docker run -d`
    still pulling or creating its container) would leave its engine running. So wait for it, bounded by its
    own timeout plus the SSH client's margin, and remove the lane once more. The removals use a connection
    of their own to such nodes (an SSH host runs one command at a time), so they never queue behind a start.
    A further Ctrl-C (SIGTERM, SIGHUP) ends the wait, not the removals: the user is told which nodes may
    still start an engine, and how to remove it.
    """
    starts, lane.starts = lane.starts, None
    pending = starts.pending() if starts is not None else []
    with spare_connections(lane, pending):
        teardown_quietly(lane)
    if not pending:
        return
    bound = lane.plan.engine.boot_timeout + 15
    deadline = time.monotonic() + bound
    noted: list[int] = []
    if starts.pending():
        with interrupts_noted(INTERRUPTS) as noted:
            lane.say(
                f"the start command is still running on {', '.join(starts.pending())} (it cannot be "
                f"recalled): waiting up to {bound:g} s for it to return, to remove what it starts "
                "(Ctrl-C again stops waiting)"
            )
            while starts.pending() and not noted and time.monotonic() < deadline:
                starts.wait(min(0.2, max(0.0, deadline - time.monotonic())))
    still = starts.pending()
    if still and noted:
        lane.say(
            f"interrupted again: not waiting for the start command on {', '.join(still)}; "
            "removing the lane once more"
        )
    with spare_connections(lane, still):
        teardown_quietly(lane)
    if still:
        why = "when you stopped the wait" if noted else f"after {bound:g} s"
        lane.say(
            f"WARNING: the start command on {', '.join(still)} was still running {why}: it may still start "
            f"the engine there. Check with `labkit status {lane.plan.recipe}`, remove it with "
            f"`labkit down {lane.plan.recipe}`"
        )


@contextlib.contextmanager
def spare_connections(lane, busy: list[str]) -> Iterator[None]:
    """Inside: lane.group reaches the nodes in `busy` over a second connection (Host.twin), since their own
    is held by a command still running there; the spare connections are closed after."""
    if not busy:
        yield
        return
    group = lane.group
    spare = {h.name: h.twin() for h in group if h.name in busy}
    lane.group = HostGroup([spare.get(h.name, h) for h in group])
    try:
        yield
    finally:
        lane.group = group
        for h in group:
            if h.name in spare and spare[h.name] is not h:
                spare[h.name].close()


def teardown_quietly(lane) -> None:
    """lane.down() on a failure path: report what it could not do, so the original error is the one raised."""
    best_effort(lane, "teardown", lane.down, warning="teardown incomplete: {error}")


def best_effort(
    lane, what: str, step: Callable[[], T], warning: str = "{what} failed ({kind}: {error}); going on"
) -> T | None:
    """step(), or None with a warning when it fails: for the steps around removal that must not prevent it."""
    try:
        return step()
    except Exception as e:
        lane.say("WARNING: " + warning.format(what=what, kind=type(e).__name__, error=e))
        return None
