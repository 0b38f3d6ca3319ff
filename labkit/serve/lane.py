"""Serving a lane: start the engine on every node, wait until it is really ready, always tear it down.

    lane = Lane(plan, run_dir=folder)
    with lane.up() as endpoint:          # every node checked, started in parallel, readiness awaited
        client(endpoint.base_url, endpoint.model)
    # here every container/process of the lane is gone on every node, and that was verified

Boot is watched, not just waited for: each poll checks the head's readiness probe (fast, local HTTP), and
about once a second every node's liveness and new log text (one SSH round trip per node, in parallel).
Boot-log lines are shown as progress and kept as facts; a known fatal line or a dead node ends the boot at
once with that node's log tail in the error. The lane id is deterministic (plan.lane_id), so a lane left up
by `labkit up` is found again by `labkit status/logs/down`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO, TypeVar

from labkit import tinymodel
from labkit.errors import LabkitError, NodeError
from labkit.nodes import (
    ENDING_SIGNALS,
    Host,
    HostError,
    HostGroup,
    NodeCalls,
    SshOptions,
    check_reachable,
    ending_as_interrupt,
    hosts_for_plan,
    ignoring_interrupts,
    interrupts_noted,
    map_nodes,
)
from labkit.recipe import repo_root
from labkit.serve.engines import BootFacts, BootLog, BootPhase, Engine, NodeLaunch, NodeSpec, engine_for
from labkit.serve.runtimes import ABSENT, ALIVE, Runtime, runtime_for

T = TypeVar("T")
LOG_TAIL_LINES = 40
_SEP = "\n--labkit-log--\n"
INTERRUPTS = (signal.SIGINT, *ENDING_SIGNALS)  # Ctrl-C, SIGTERM, SIGHUP: what may cut a wait short
WATCH_END_WAIT = 10.0  # seconds a failed boot waits for the node polls in flight, so their nodes' logs are saved


class BootError(LabkitError):
    """The lane did not come up: names the node, the reason, and shows the end of that node's log."""

    def __init__(self, lane_id: str, node: str, reason: str, log_tail: str = "", line: str = ""):
        self.lane_id = lane_id
        self.node = node
        self.reason = reason
        self.line = line
        self.log_tail = log_tail
        text = f"lane {lane_id} failed to boot on {node}: {reason}"
        if line:
            text += f"\n  log line: {line.strip()}"
        if log_tail:
            text += f"\n  last lines of {node}'s log:\n" + "\n".join("    | " + s for s in log_tail.splitlines())
        text += "\n  (everything the lane started has been removed)"
        super().__init__(text)


class BootTimeout(BootError):
    """Readiness was not reached within engine.boot_timeout."""


class LaneFailed(LabkitError):
    """A node of a running lane died (e.g. mid-measurement); names it and shows its log tail."""


class LaneBusy(LabkitError):
    """Something of this lane is already present on a node; nothing was started."""


@dataclass
class Endpoint:
    """A ready lane: where to send requests and what the boot revealed."""

    lane_id: str
    base_url: str  # http://head:port/v1
    model: str  # served model name, for the "model" field of requests
    head: str
    nodes: list[str]
    boot: BootFacts
    run_dir: Path | None = None

    @property
    def root_url(self) -> str:
        return self.base_url.removesuffix("/v1")


@dataclass
class _NodeWatch:
    host: Host
    launch: NodeLaunch
    log: BootLog
    offset: int = 0
    state: str = ABSENT
    text_tail: list[str] = field(default_factory=list)
    phases: list[BootPhase] = field(default_factory=list)
    # Held while a poll fetches from `offset` and records the text, so teardown's log capture never fetches
    # the same text as a poll; `closed` once teardown has taken the node's log over (later polls skip it).
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: bool = False


def node_specs(plan, hosts: list[Host] | None = None) -> list[NodeSpec]:
    """Nodes as the engine sees them: name plus the address peers and clients use (recipe names as given)."""
    if hosts is None:
        return [NodeSpec(n, "127.0.0.1" if n == "localhost" else n) for n in plan.cluster.nodes]
    return [NodeSpec(h.name, h.address) for h in hosts]


def python_for(plan, hosts: list[Host] | None = None) -> str:
    """The interpreter for python-launched engines: this one on the local host, `python3` elsewhere."""
    local = hosts is not None and all(h.is_local for h in hosts) or (hosts is None and plan.cluster.is_local)
    return sys.executable if local and plan.engine.runtime == "process" else "python3"


def launches(plan, hosts: list[Host] | None = None) -> list[NodeLaunch]:
    python = python_for(plan, hosts)
    out = engine_for(plan).launch(plan, node_specs(plan, hosts), python=python)
    if plan.engine.kind == "sim" and python == sys.executable:
        # A local simulator runs this checkout's labkit even when it is not pip-installed.
        root = str(repo_root())
        out = [dataclasses.replace(ln, env=ln.env + (("PYTHONPATH", root),)) for ln in out]
    return out


def lane_commands(plan, hosts: list[Host] | None = None) -> dict[str, str]:
    """{node: the exact shell command `up` runs there} — pure, for `labkit show` and dry runs."""
    runtime = runtime_for(plan)
    plan = tinymodel.materialize(plan, build=False)  # show where a labkit-built model will be
    return {ln.node: runtime.start_command(ln, plan.engine.image, plan.mounts()) for ln in launches(plan, hosts)}


def pin_revision(plan, head: Host):
    """The plan with its model revision pinned to a commit, read from refs/<name> on the head node.

    A lane served from the shared HF cache is given snapshots/<commit>; a branch name such as "main" has
    no snapshot folder of its own, so it is resolved the way huggingface_hub does, through refs/.
    Lanes with an explicit model path, a staged view or no shared cache are returned unchanged.
    """
    model = plan.model
    if plan.view is not None or model.path or not plan.cluster.shared_cache or _COMMIT.fullmatch(model.revision):
        return plan
    ref = f"{plan.cluster.shared_cache}/{model.cache_dir_name}/refs/{model.revision}"
    r = head.run(["cat", ref], timeout=30)
    commit = r.stdout.strip()
    if not r.ok or not _COMMIT.fullmatch(commit):
        why = r.stderr.strip() or f"it holds {commit[:60]!r}, not a commit hash"
        raise LabkitError(f"{head.name}: cannot resolve model revision {model.revision!r} of {model.repo}: "
                          f"{ref}: {why}")
    return dataclasses.replace(plan, model=dataclasses.replace(model, revision=commit))


_COMMIT = re.compile(r"[0-9a-f]{40}")


def _tail(text: str, lines: int = LOG_TAIL_LINES) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


class Lane:
    """One lane on its nodes. `up()` is the context manager; `start`/`down`/`status`/`logs` for the CLI."""

    def __init__(self, plan, group: HostGroup | None = None, ssh: SshOptions | None = None,
                 run_dir: str | Path | None = None, progress: TextIO | None = sys.stderr, poll: float = 0.2,
                 node_poll: float = 1.0, stop_grace: float = 10.0):
        self.plan = plan
        self.group = group or hosts_for_plan(plan, ssh if ssh is not None else SshOptions.from_env())
        self.engine: Engine = engine_for(plan)
        self.runtime: Runtime = runtime_for(plan, stop_grace)
        self.run_dir = Path(run_dir) if run_dir else None
        self.progress = progress
        self.poll = poll
        self.node_poll = node_poll
        self.lane_id = plan.lane_id
        self._watch: dict[str, _NodeWatch] = {}
        self._starts: NodeCalls | None = None  # the start commands of the last start(), until they all returned
        self._t0 = 0.0
        #: seconds per lifecycle step of the last start/down (check, start, ready, down), for benchmarks and records
        self.timings: dict[str, float] = {}

    # ------------------------------------------------------------------ pure views

    def launches(self) -> list[NodeLaunch]:
        return launches(self.plan, self.group.hosts)

    def commands(self) -> dict[str, str]:
        return lane_commands(self.plan, self.group.hosts)

    @property
    def head_address(self) -> str:
        return self.plan.cluster.head_address or self.group.head.address

    @property
    def root_url(self) -> str:
        return f"http://{self.head_address}:{self.plan.engine.port}"

    # ------------------------------------------------------------------ lifecycle

    @contextlib.contextmanager
    def up(self) -> Iterator[Endpoint]:
        """Boot, yield the endpoint, and on exit (normal, exception, Ctrl-C, SIGTERM) remove and verify."""
        with ending_as_interrupt():
            endpoint = self.start()
            failure: BaseException | None = None
            try:
                yield endpoint
            except BaseException as e:
                failure = e
                raise
            finally:
                died = None
                with ignoring_interrupts():  # nothing between here and the removal may be cut short
                    try:
                        if failure is not None and not isinstance(failure, KeyboardInterrupt):
                            died = self._best_effort("checking which node died", self._dead_node_report)
                    finally:
                        self.down()
                if died is not None:
                    raise died from failure

    def start(self) -> Endpoint:
        """Check nodes, start every node in parallel, wait for readiness. On any failure, remove everything."""
        t = time.monotonic()
        check_reachable(self.group)
        self.timings = {"check": time.monotonic() - t}
        self.plan = pin_revision(self.plan, self.group.head)
        self.refuse_if_present()
        # A recipe whose model.repo names a labkit-built model ("labkit/tiny-llama") gets its cached file.
        self.plan = tinymodel.materialize(self.plan, log=self.progress)
        self._say(f"lane {self.lane_id}: starting {self.plan.engine.kind} on {len(self.group)} node(s) "
                  f"({', '.join(self.group.names)})")
        if self.run_dir:
            (self.run_dir / "logs").mkdir(parents=True, exist_ok=True)
        try:
            with ending_as_interrupt():
                self._t0 = time.monotonic()
                self._start_all()
                self.timings["start"] = self._elapsed()
                facts = self._wait_ready()
                self.timings["ready"] = facts.boot_seconds or self._elapsed()
        except BaseException as e:
            with ignoring_interrupts():
                if isinstance(e, KeyboardInterrupt):
                    self._say("interrupted: removing the lane on every node")
                self._remove_after_failed_start()
            raise
        endpoint = Endpoint(self.lane_id, self.root_url + "/v1", self.plan.served_name, self.group.head.name,
                            self.group.names, facts, self.run_dir)
        if self.run_dir:
            (self.run_dir / "boot.json").write_text(json.dumps(facts.to_dict(), indent=2) + "\n")
        self._say(f"lane {self.lane_id}: ready at {endpoint.base_url} after {facts.boot_seconds:.1f} s")
        return endpoint

    def down(self) -> None:
        """Remove the lane on every node and verify nothing is left; NodeError names any node that kept some.

        All of it runs with Ctrl-C/SIGTERM/SIGHUP ignored. Saving the logs first is best-effort: a full disk,
        a broken run folder or an unreachable node there never keeps the stop commands from running.
        """
        t = time.monotonic()
        with ignoring_interrupts():
            try:
                self._best_effort("saving the lane's logs before removal", self._capture_logs)
            finally:
                failures: dict[str, str] = {}
                try:  # on every node at once; a node that fails is named below, after the check of all
                    self.group.run(lambda h: self.runtime.stop_command(h.name), f"removing lane {self.lane_id}",
                                   timeout=self.runtime.stop_grace + 60)
                except NodeError as e:
                    failures = e.failures
                try:
                    left = self.leftovers()
                except NodeError as e:
                    left = e.failures
        self.timings["down"] = time.monotonic() - t
        problems = dict(failures)  # a node may both fail its stop command and keep something: say both
        for node, what in left.items():
            problems[node] = f"{problems[node]}; left: {what}" if node in problems else what
        if problems:
            raise NodeError(f"lane {self.lane_id} still present after removal", problems)

    def leftovers(self) -> dict[str, str]:
        """{node: what of this lane is still present} for nodes that are not clean."""
        out = self.group.run(self.runtime.leftovers_command(), f"listing lane {self.lane_id}", timeout=60)
        return {n: r.stdout.strip() for n, r in out.items() if r.stdout.strip()}

    def status(self) -> dict[str, str]:
        """{node: alive | dead | absent}."""
        out = self.group.run(lambda h: self.runtime.alive_command(h.name), f"status of lane {self.lane_id}",
                             timeout=60)
        return {n: (r.stdout.strip().splitlines() or [ABSENT])[0] for n, r in out.items()}

    def logs(self, tail: int | None = None, nodes: list[str] | None = None) -> dict[str, str]:
        hosts = [h for h in self.group if nodes is None or h.name in nodes]
        out = self.group.map(lambda h: h.run(self.runtime.logs_command(h.name, tail=tail), timeout=120).stdout,
                             f"logs of lane {self.lane_id}", hosts)
        return out

    def follow(self, out: TextIO, nodes: list[str] | None = None, interval: float = 1.0,
               stop: threading.Event | None = None) -> None:
        """Print new log text from the nodes as it arrives (node-prefixed when several) until `stop` or Ctrl-C."""
        hosts = [h for h in self.group if nodes is None or h.name in nodes]
        offsets = {h.name: 0 for h in hosts}
        partial = {h.name: "" for h in hosts}
        stop = stop or threading.Event()
        while not stop.is_set():
            texts = self.group.map(lambda h: h.run(self.runtime.logs_command(h.name, offset=offsets[h.name]),
                                                   timeout=60).stdout, f"logs of lane {self.lane_id}", hosts)
            for name, text in texts.items():
                offsets[name] += len(text.encode())
                lines = (partial[name] + text).split("\n")
                partial[name] = lines.pop()
                for line in lines:
                    out.write(f"{name}: {line}\n" if len(hosts) > 1 else line + "\n")
            out.flush()
            stop.wait(interval)

    def check(self) -> None:
        """Raise LaneFailed (with the dead node's log tail) unless every node's engine is alive; for use between runs."""
        report = self._dead_node_report(attempts=1)
        if report is not None:
            raise report

    def ready(self) -> bool:
        """Whether the head answers every readiness probe now."""
        return all(_get_status(self.root_url + p.path) == p.status for p in self.engine.probes(self.plan))

    # ------------------------------------------------------------------ internals

    def refuse_if_present(self) -> None:
        """LaneBusy unless nothing of this lane is on any node. Run before staging too: re-staging the view
        under a running engine would replace files it has open."""
        left = self.leftovers()
        if left:
            raise LaneBusy(f"lane {self.lane_id} already has something on {', '.join(left)}: "
                           + "; ".join(f"{n}: {w}" for n, w in left.items())
                           + f"\n  (nothing was started; `labkit down {self.plan.recipe}` removes it)")

    def _start_all(self) -> None:
        by_node = {ln.node: ln for ln in self.launches()}
        self._watch = {h.name: _NodeWatch(h, by_node[h.name], self.engine.boot_log(h.name, h is self.group.head))
                       for h in self.group}

        def start(h: Host) -> str:
            cmd = self.runtime.start_command(by_node[h.name], self.plan.engine.image, self.plan.mounts())
            r = h.run(cmd, timeout=self.plan.engine.boot_timeout).check("start")
            return r.stdout.strip()

        self._starts = self.group.begin(start)
        self._starts.results(f"starting lane {self.lane_id}")
        self._say(f"[{self._elapsed():6.1f}s] started on all nodes; waiting for readiness "
                  f"({self.root_url}{self.engine.probes(self.plan)[0].path}, timeout {self.plan.engine.boot_timeout:g} s)")

    @property
    def started_at(self) -> float:
        """time.monotonic() when the start commands were issued (boot_seconds counts from here)."""
        return self._t0

    def _elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _wait_ready(self) -> BootFacts:
        """Probe the head every `poll` s here; a watcher thread checks nodes and logs every `node_poll` s.

        The node round trips (SSH) run beside the probe loop, so a slow node never delays noticing readiness.
        """
        probes = self.engine.probes(self.plan)
        timeout = self.plan.engine.boot_timeout
        stop = threading.Event()
        finished = threading.Event()  # not Thread.is_alive(): on 3.11 a join() cut short by Ctrl-C marks it stopped
        problem: list[BaseException] = []

        def watch() -> None:
            try:
                while not stop.is_set():
                    t = time.monotonic()
                    try:
                        self._poll_nodes()
                    except BaseException as e:  # handed to the main loop
                        problem.append(e)
                        return
                    stop.wait(max(0.0, self.node_poll - (time.monotonic() - t)))
            finally:
                finished.set()

        threading.Thread(target=watch, name="labkit-boot-watch", daemon=True).start()
        last_note = 0.0
        try:
            while True:
                if problem:
                    raise problem[0]
                if _get_status(self.root_url + probes[0].path, timeout=1.0) == probes[0].status:
                    noticed = self._elapsed()
                    if all(_get_status(self.root_url + p.path) == p.status for p in probes[1:]):
                        stop.set()
                        finished.wait()
                        if problem:
                            raise problem[0]
                        self._poll_nodes()  # the lines up to readiness, and every node still alive
                        return self._facts(noticed)
                now = self._elapsed()
                if now > timeout:
                    head = self._watch[self.group.head.name]
                    raise BootTimeout(self.lane_id, head.host.name, f"not ready after {timeout:g} s (engine.boot_timeout)",
                                      _tail("".join(head.text_tail)))
                if now - last_note >= 30:
                    last_note = now
                    if now > 1:
                        self._say(f"[{now:6.1f}s] still booting ...")
                time.sleep(self.poll)
        finally:
            self._end_watch(stop, finished)

    def _end_watch(self, stop: threading.Event, finished: threading.Event) -> None:
        """Stop the boot watcher and wait for its node polls in flight: at most WATCH_END_WAIT s, and saying so.

        A poll can take up to its 60 s timeout on a slow node. A further Ctrl-C (SIGTERM, SIGHUP) ends the wait;
        the teardown then leaves the log of a node still being polled to that poll (see _capture_logs).
        """
        stop.set()
        with interrupts_noted(INTERRUPTS) as noted:
            if finished.wait(0.5):
                return
            busy = [n for n, w in self._watch.items() if w.lock.locked()]
            self._say(f"ending the boot watch: waiting up to {WATCH_END_WAIT:g} s for its poll of "
                      f"{', '.join(busy) or 'the nodes'} to return (Ctrl-C again stops waiting)")
            deadline = time.monotonic() + WATCH_END_WAIT
            while not noted and time.monotonic() < deadline and not finished.wait(0.1):
                pass

    def _poll_nodes(self) -> None:
        """One round trip per node: liveness, then new log text; raise BootError on a fatal line or a dead node."""

        def poll(h: Host) -> str | None:
            w = self._watch[h.name]
            with w.lock:
                if w.closed:
                    return None
                cmd = f"( {self.runtime.alive_command(h.name)} ); printf '{_SEP}'; " + \
                    self.runtime.logs_command(h.name, offset=w.offset)
                r = h.run(cmd, timeout=60)
                state, _, text = r.stdout.partition(_SEP)
                w.state = state.strip()
                self._record(w, text)  # an OSError here (run folder) is raised as is, below
                return w.state

        outcomes = map_nodes(poll, self.group.hosts)
        problems: list[BootError] = []
        for name, (state, err) in outcomes.items():
            w = self._watch[name]
            if err is not None:
                if not isinstance(err, HostError):
                    raise err
                problems.append(BootError(self.lane_id, name, f"cannot watch node: {err}",
                                          _tail("".join(w.text_tail))))
                continue
            if state is None:  # the teardown has taken this node's log over
                continue
            if w.log.fatal:
                reason, line = w.log.fatal
                problems.append(BootError(self.lane_id, name, f"fatal log line ({reason})",
                                          _tail("".join(w.text_tail)), line))
            elif state != ALIVE:
                what = "exited during boot" if state != ABSENT else "its container/process disappeared during boot"
                problems.append(BootError(self.lane_id, name, f"engine {what}", _tail("".join(w.text_tail))))
        if problems:
            raise problems[0]

    def _record(self, w: _NodeWatch, text: str) -> None:
        if not text:
            return
        w.offset += len(text.encode())
        w.text_tail = (w.text_tail + [text])[-50:]
        if self.run_dir:
            with open(self.run_dir / "logs" / f"{w.host.name}.log", "a", encoding="utf-8") as f:
                f.write(text)
        at = self._elapsed()  # when labkit saw the line (node polls are ~1 s apart), not the engine's stamp
        shown: dict[str, list[str]] = {}
        for pat, line in w.log.feed(text):
            w.phases.append(BootPhase(round(at, 3), w.host.name, pat.name, line))
            shown.setdefault(line, []).append(pat.label)
        who = w.host.name + ": " if len(self.group) > 1 else ""
        for line, labels in shown.items():
            self._say(f"[{at:6.1f}s] {who}{', '.join(labels)}: {line.strip()[:160]}")

    def _facts(self, noticed: float) -> BootFacts:
        head = self._watch[self.group.head.name]
        facts = self.engine.facts(head.log.matches)
        facts.boot_seconds = round(noticed, 3)
        for w in self._watch.values():
            facts.phases += w.phases
        facts.phases.sort(key=lambda p: p.at)
        return facts

    def _capture_logs(self) -> None:
        """Fetch the rest of every node's log into the run folder before removal (nothing lost).

        Each node's log is first taken over from the boot watcher, so no text is fetched and saved twice. A node
        whose boot poll has not returned (a slow node after an interrupt) is skipped and named: that poll saves
        what it fetched when it returns; what the node logs after that is not saved.
        """
        if not self.run_dir or not self._watch:
            return
        hosts, busy = [], []
        for h in self.group:
            w = self._watch[h.name]
            if w.lock.acquire(blocking=False):
                w.closed = True
                w.lock.release()
                hosts.append(h)
            else:
                busy.append(h.name)
        if busy:
            self._say(f"not saving the rest of the log of {', '.join(busy)}: the boot's node poll there has not "
                      "returned (it saves what it fetched when it does)")

        def fetch(h: Host) -> str:
            return h.run(self.runtime.logs_command(h.name, offset=self._watch[h.name].offset), timeout=60).stdout

        for name, (text, err) in map_nodes(fetch, hosts).items():
            if err is None and text:
                w = self._watch[name]
                w.offset += len(text.encode())
                with open(self.run_dir / "logs" / f"{name}.log", "a", encoding="utf-8") as f:
                    f.write(text)

    def _dead_node_report(self, attempts: int = 4) -> LaneFailed | None:
        """After an error inside `with lane.up()`: name a node that died, with its log tail, if one did."""
        dead: list[str] = []
        for attempt in range(attempts):  # a client can see the connection drop a moment before the process is gone
            try:
                states = self.status()
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
            tails = self.logs(tail=LOG_TAIL_LINES, nodes=dead)
        except LabkitError:
            tails = {}
        lines = [f"lane {self.lane_id}: engine died on {', '.join(dead)} while in use"]
        for n in dead:
            lines.append(f"  last lines of {n}'s log:")
            lines += ["    | " + s for s in tails.get(n, "").rstrip("\n").splitlines()]
        lines.append("  (everything the lane started has been removed)")
        return LaneFailed("\n".join(lines))

    def _remove_after_failed_start(self) -> None:
        """Teardown for start(); when it was cut short (Ctrl-C) while start commands ran, also wait for those.

        A start command sent to a node cannot be recalled; one that returned after the teardown (`docker run -d`
        still pulling or creating its container) would leave its engine running. So wait for it, bounded by its
        own timeout plus the SSH client's margin, and remove the lane once more. The removals use a connection
        of their own to such nodes (an SSH host runs one command at a time), so they never queue behind a start.
        A further Ctrl-C (SIGTERM, SIGHUP) ends the wait, not the removals: the user is told which nodes may
        still start an engine, and how to remove it.
        """
        starts, self._starts = self._starts, None
        pending = starts.pending() if starts is not None else []
        with self._spare_connections(pending):
            self._teardown_quietly()
        if not pending:
            return
        bound = self.plan.engine.boot_timeout + 15
        deadline = time.monotonic() + bound
        noted: list[int] = []
        if starts.pending():
            with interrupts_noted(INTERRUPTS) as noted:
                self._say(f"the start command is still running on {', '.join(starts.pending())} (it cannot be "
                          f"recalled): waiting up to {bound:g} s for it to return, to remove what it starts "
                          "(Ctrl-C again stops waiting)")
                while starts.pending() and not noted and time.monotonic() < deadline:
                    starts.wait(min(0.2, max(0.0, deadline - time.monotonic())))
        still = starts.pending()
        if still and noted:
            self._say(f"interrupted again: not waiting for the start command on {', '.join(still)}; "
                      "removing the lane once more")
        with self._spare_connections(still):
            self._teardown_quietly()
        if still:
            why = "when you stopped the wait" if noted else f"after {bound:g} s"
            self._say(f"WARNING: the start command on {', '.join(still)} was still running {why}: it may still start "
                      f"the engine there. Check with `labkit status {self.plan.recipe}`, remove it with "
                      f"`labkit down {self.plan.recipe}`")

    @contextlib.contextmanager
    def _spare_connections(self, busy: list[str]) -> Iterator[None]:
        """Inside: self.group reaches the nodes in `busy` over a second connection (Host.twin), since their own
        is held by a command still running there; the spare connections are closed after."""
        if not busy:
            yield
            return
        group = self.group
        spare = {h.name: h.twin() for h in group if h.name in busy}
        self.group = HostGroup([spare.get(h.name, h) for h in group])
        try:
            yield
        finally:
            self.group = group
            for h in group:
                if h.name in spare and spare[h.name] is not h:
                    spare[h.name].close()

    def _teardown_quietly(self) -> None:
        """down() on a failure path: report what it could not do, so the original error is the one raised."""
        self._best_effort("teardown", self.down, warning="teardown incomplete: {error}")

    def _best_effort(self, what: str, step: Callable[[], T],
                     warning: str = "{what} failed ({kind}: {error}); going on") -> T | None:
        """step(), or None with a warning when it fails: for the steps around removal that must not prevent it."""
        try:
            return step()
        except Exception as e:
            self._say("WARNING: " + warning.format(what=what, kind=type(e).__name__, error=e))
            return None

    def _say(self, text: str) -> None:
        """Progress text; a closed terminal (SSH session gone) or a closed pipe never stops the caller."""
        if self.progress is not None:
            try:
                print(text, file=self.progress, flush=True)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        self.group.close()


def _get_status(url: str, timeout: float = 2.0) -> int | None:
    """HTTP status of a GET, or None when nothing answers (refused, reset, timeout)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except (urllib.error.URLError, OSError, ValueError):
        return None
