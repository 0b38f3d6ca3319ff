"""Teardown: remove the lane on every node and verify it, whatever failed or interrupted on the way.

Everything here runs with Ctrl-C/SIGTERM/SIGHUP ignored or noted, never cut short: saving the logs first is
best-effort, and a start command still running on a node (it cannot be recalled) is waited for, so what it
starts is removed too. The functions read the lane's `LaneState` (labkit.serve.state); `Lane` (labkit.serve.lane)
hands them the steps a test may replace (the log capture, the status read, the removal itself).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

from labkit.errors import LabkitError, NodeError
from labkit.nodes import (
    Host,
    HostError,
    HostGroup,
    NodeCalls,
    ignoring_interrupts,
    interrupts_noted,
    map_nodes,
)
from labkit.serve.errors import LOG_TAIL_LINES, LaneFailed
from labkit.serve.observe import leftovers, logs
from labkit.serve.runtimes import ALIVE
from labkit.serve.state import LaneState, NodeWatch
from labkit.serve.watch import INTERRUPTS

T = TypeVar("T")


def down(lane: LaneState, capture: Callable[[], None], timings: dict[str, float]) -> None:
    """Remove the lane on every node and verify nothing is left; NodeError names any node that kept some.
    `capture` saves the logs first; the removal's seconds go into `timings` ("down").

    All of it runs with Ctrl-C/SIGTERM/SIGHUP ignored. Saving the logs first is best-effort: a full disk,
    a broken run folder or an unreachable node there never keeps the stop commands from running.
    """
    t = time.monotonic()
    with ignoring_interrupts():
        try:
            best_effort(lane.say, "saving the lane's logs before removal", capture)
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
                left = leftovers(lane)
            except NodeError as e:
                left = e.failures
    timings["down"] = time.monotonic() - t
    problems = dict(failures)  # a node may both fail its stop command and keep something: say both
    for node, what in left.items():
        problems[node] = f"{problems[node]}; left: {what}" if node in problems else what
    if problems:
        raise NodeError(f"lane {lane.lane_id} still present after removal", problems)


def capture_logs(lane: LaneState, watched: dict[str, NodeWatch]) -> None:
    """Fetch the rest of every node's log into the run sink before removal (nothing lost).

    Each node's log is first taken over from the boot watcher, so no text is fetched and saved twice. A node
    whose boot poll has not returned (a slow node after an interrupt) is skipped and named: that poll saves
    what it fetched when it returns; what the node logs after that is not saved.
    """
    sink = lane.sink
    if sink is None or not watched:
        return
    hosts, busy = [], []
    for h in lane.group:
        w = watched[h.name]
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
        return h.run(lane.runtime.logs_command(h.name, offset=watched[h.name].offset), timeout=60).stdout

    for name, (text, err) in map_nodes(fetch, hosts).items():
        if err is None and text:
            w = watched[name]
            w.offset += len(text.encode())
            sink.node_log(name, text)


def dead_node_report(
    lane: LaneState, status: Callable[[], dict[str, str]], attempts: int = 4
) -> LaneFailed | None:
    """After an error inside `with lane.up()`: name a node that died, with its log tail, if one did.
    `status` reads {node: state} (the Lane's, so a test can see whether it was asked)."""
    dead: list[str] = []
    for attempt in range(
        attempts
    ):  # a client can see the connection drop a moment before the process is gone
        try:
            states = status()
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
        tails = logs(lane, tail=LOG_TAIL_LINES, nodes=dead)
    except LabkitError:
        tails = {}
    lines = [f"lane {lane.lane_id}: engine died on {', '.join(dead)} while in use"]
    for n in dead:
        lines.append(f"  last lines of {n}'s log:")
        lines += ["    | " + s for s in tails.get(n, "").rstrip("\n").splitlines()]
    lines.append("  (everything the lane started has been removed)")
    return LaneFailed("\n".join(lines))


def remove_after_failed_start(
    lane: LaneState, starts: NodeCalls[str] | None, teardown: Callable[[list[str]], None]
) -> None:
    """Teardown for start(); when it was cut short (Ctrl-C) while start commands ran, also wait for those.
    `teardown(busy)` removes the lane quietly, reaching the nodes in `busy` over a spare connection.

    A start command sent to a node cannot be recalled; one that returned after the teardown (`docker run -d`
    still pulling or creating its container) would leave its engine running. So wait for it, bounded by its
    own timeout plus the SSH client's margin, and remove the lane once more. The removals use a connection
    of their own to such nodes (an SSH host runs one command at a time), so they never queue behind a start.
    A further Ctrl-C (SIGTERM, SIGHUP) ends the wait, not the removals: the user is told which nodes may
    still start an engine, and how to remove it.
    """
    pending = starts.pending() if starts is not None else []
    teardown(pending)
    if starts is None or not pending:
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
    teardown(still)
    if still:
        why = "when you stopped the wait" if noted else f"after {bound:g} s"
        lane.say(
            f"WARNING: the start command on {', '.join(still)} was still running {why}: it may still start "
            f"the engine there. Check with `labkit status {lane.plan.recipe}`, remove it with "
            f"`labkit down {lane.plan.recipe}`"
        )


@contextlib.contextmanager
def spare_connections(group: HostGroup, busy: list[str]) -> Iterator[HostGroup]:
    """Inside: a group that reaches the nodes in `busy` over a second connection (Host.twin), since their own
    is held by a command still running there; the spare connections are closed after."""
    if not busy:
        yield group
        return
    spare = {h.name: h.twin() for h in group if h.name in busy}
    try:
        yield HostGroup([spare.get(h.name, h) for h in group])
    finally:
        for h in group:
            if h.name in spare and spare[h.name] is not h:
                spare[h.name].close()


def teardown_quietly(say: Callable[[str], None], down: Callable[[], None]) -> None:
    """down() on a failure path: report what it could not do, so the original error is the one raised."""
    best_effort(say, "teardown", down, warning="teardown incomplete: {error}")


def best_effort(
    say: Callable[[str], None],
    what: str,
    step: Callable[[], T],
    warning: str = "{what} failed ({kind}: {error}); going on",
) -> T | None:
    """step(), or None with a warning when it fails: for the steps around removal that must not prevent it."""
    try:
        return step()
    except Exception as e:
        say("WARNING: " + warning.format(what=what, kind=type(e).__name__, error=e))
        return None
