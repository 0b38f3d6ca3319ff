"""The boot watch: from the start commands to a lane that is really ready, or a BootError naming the node.

Each poll checks the head's readiness probe (fast, local HTTP), and about once a second a watcher thread
checks every node's liveness and new log text (one SSH round trip per node, in parallel), so a slow node
never delays noticing readiness. Boot-log lines are shown as progress and kept as facts; a known fatal line
or a dead node ends the boot at once with that node's log tail in the error.

The functions read the lane's `LaneState` and keep their per-node state in `Started.watched`
(labkit.serve.state), which the teardown takes over (see teardown.capture_logs); new log text goes to the
state's run sink.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.error
import urllib.request

from labkit.nodes import ENDING_SIGNALS, Host, HostError, interrupts_noted, map_nodes
from labkit.serve.engines import BootFacts, BootPhase, NodeLaunch
from labkit.serve.errors import BootError, BootTimeout, log_tail
from labkit.serve.runtimes import ABSENT, ALIVE
from labkit.serve.state import LaneState, NodeWatch, Started

SEP = "\n--labkit-log--\n"
INTERRUPTS = (signal.SIGINT, *ENDING_SIGNALS)  # Ctrl-C, SIGTERM, SIGHUP: what may cut a wait short
WATCH_END_WAIT = (
    10.0  # seconds a failed boot waits for the node polls in flight, so their nodes' logs are saved
)


def node_watches(lane: LaneState, by_node: dict[str, NodeLaunch]) -> dict[str, NodeWatch]:
    """A fresh NodeWatch per node of the lane, the head's log parsed as the head's."""
    return {
        h.name: NodeWatch(h, by_node[h.name], lane.engine.boot_log(h.name, h is lane.group.head))
        for h in lane.group
    }


def wait_ready(lane: LaneState, started: Started) -> BootFacts:
    """Probe the head every `lane.poll` s here; a watcher thread checks nodes and logs every `lane.node_poll` s.

    The node round trips (SSH) run beside the probe loop, so a slow node never delays noticing readiness.
    """
    probes = lane.engine.probes(lane.plan)
    timeout = lane.plan.engine.boot_timeout
    stop = threading.Event()
    finished = (
        threading.Event()
    )  # not Thread.is_alive(): on 3.11 a join() cut short by Ctrl-C marks it stopped
    problem: list[BaseException] = []

    def watch() -> None:
        try:
            while not stop.is_set():
                t = time.monotonic()
                try:
                    poll_nodes(lane, started)
                except BaseException as e:  # handed to the main loop
                    problem.append(e)
                    return
                stop.wait(max(0.0, lane.node_poll - (time.monotonic() - t)))
        finally:
            finished.set()

    threading.Thread(target=watch, name="labkit-boot-watch", daemon=True).start()
    last_note = 0.0
    try:
        while True:
            if problem:
                raise problem[0]
            if http_status(lane.root_url + probes[0].path, timeout=1.0) == probes[0].status:
                noticed = started.elapsed()
                if all(http_status(lane.root_url + p.path) == p.status for p in probes[1:]):
                    stop.set()
                    finished.wait()
                    if problem:
                        raise problem[0]
                    poll_nodes(lane, started)  # the lines up to readiness, and every node still alive
                    return boot_facts(lane, started, noticed)
            now = started.elapsed()
            if now > timeout:
                head = started.watched[lane.group.head.name]
                raise BootTimeout(
                    lane.lane_id,
                    head.host.name,
                    f"not ready after {timeout:g} s (engine.boot_timeout)",
                    log_tail("".join(head.text_tail)),
                )
            if now - last_note >= 30:
                last_note = now
                if now > 1:
                    lane.say(f"[{now:6.1f}s] still booting ...")
            time.sleep(lane.poll)
    finally:
        end_watch(lane, started, stop, finished)


def end_watch(lane: LaneState, started: Started, stop: threading.Event, finished: threading.Event) -> None:
    """Stop the boot watcher and wait for its node polls in flight: at most WATCH_END_WAIT s, and saying so.

    A poll can take up to its 60 s timeout on a slow node. A further Ctrl-C (SIGTERM, SIGHUP) ends the wait;
    the teardown then leaves the log of a node still being polled to that poll (see teardown.capture_logs).
    """
    stop.set()
    with interrupts_noted(INTERRUPTS) as noted:
        if finished.wait(0.5):
            return
        busy = [n for n, w in started.watched.items() if w.lock.locked()]
        lane.say(
            f"ending the boot watch: waiting up to {WATCH_END_WAIT:g} s for its poll of "
            f"{', '.join(busy) or 'the nodes'} to return (Ctrl-C again stops waiting)"
        )
        deadline = time.monotonic() + WATCH_END_WAIT
        while not noted and time.monotonic() < deadline and not finished.wait(0.1):
            pass


def poll_nodes(lane: LaneState, started: Started) -> None:
    """One round trip per node: liveness, then new log text; raise BootError on a fatal line or a dead node."""

    def poll(h: Host) -> str | None:
        w = started.watched[h.name]
        with w.lock:
            if w.closed:
                return None
            cmd = f"( {lane.runtime.alive_command(h.name)} ); printf '{SEP}'; " + lane.runtime.logs_command(
                h.name, offset=w.offset
            )
            r = h.run(cmd, timeout=60)
            state, _, text = r.stdout.partition(SEP)
            w.state = state.strip()
            record(lane, started, w, text)  # an OSError here (the sink's run folder) is raised as is, below
            return w.state

    outcomes = map_nodes(poll, lane.group.hosts)
    problems: list[BootError] = []
    for name, (state, err) in outcomes.items():
        w = started.watched[name]
        if err is not None:
            if not isinstance(err, HostError):
                raise err
            problems.append(
                BootError(lane.lane_id, name, f"cannot watch node: {err}", log_tail("".join(w.text_tail)))
            )
            continue
        if state is None:  # the teardown has taken this node's log over
            continue
        if w.log.fatal:
            reason, line = w.log.fatal
            problems.append(
                BootError(
                    lane.lane_id, name, f"fatal log line ({reason})", log_tail("".join(w.text_tail)), line
                )
            )
        elif state != ALIVE:
            what = (
                "exited during boot" if state != ABSENT else "its container/process disappeared during boot"
            )
            problems.append(BootError(lane.lane_id, name, f"engine {what}", log_tail("".join(w.text_tail))))
    if problems:
        raise problems[0]


def record(lane: LaneState, started: Started, w: NodeWatch, text: str) -> None:
    """New log text of a node: handed to the run sink, parsed, and its boot lines shown as progress."""
    if not text:
        return
    w.offset += len(text.encode())
    w.text_tail = (w.text_tail + [text])[-50:]
    if lane.sink is not None:
        lane.sink.node_log(w.host.name, text)
    at = started.elapsed()  # when labkit saw the line (node polls are ~1 s apart), not the engine's stamp
    shown: dict[str, list[str]] = {}
    for pat, line in w.log.feed(text):
        w.phases.append(BootPhase(round(at, 3), w.host.name, pat.name, line))
        shown.setdefault(line, []).append(pat.label)
    who = w.host.name + ": " if len(lane.group) > 1 else ""
    for line, labels in shown.items():
        lane.say(f"[{at:6.1f}s] {who}{', '.join(labels)}: {line.strip()[:160]}")


def boot_facts(lane: LaneState, started: Started, noticed: float) -> BootFacts:
    """The head's boot facts, with every node's phases in the order labkit saw them and every node's transport
    (labkit.serve.transport)."""
    head = started.watched[lane.group.head.name]
    facts = lane.engine.facts(head.log.matches)
    facts.boot_seconds = round(noticed, 3)
    for name, w in started.watched.items():
        facts.phases += w.phases
        if w.log.transport.seen:
            facts.transport[name] = w.log.transport.transport().to_dict()
    facts.phases.sort(key=lambda p: p.at)
    return facts


def http_status(url: str, timeout: float = 2.0) -> int | None:
    """HTTP status of a GET, or None when nothing answers (refused, reset, timeout)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError, ValueError):
        return None
