"""Serving a lane: start the engine on every node, wait until it is really ready, always tear it down.

    lane = Lane(plan, sink=store.RunFolderSink(folder))
    with lane.up() as endpoint:          # every node checked, started in parallel, readiness awaited
        client(endpoint.base_url, endpoint.model)
    # here every container/process of the lane is gone on every node, and that was verified

`Lane` holds the lane's `LaneState` (labkit.serve.state) and composes its steps, keeping what each returns:
start.py (checks, start commands, the endpoint), watch.py (the boot watch: readiness probe, node liveness,
boot-log lines), readyfacts.py (memory and KV pool once ready), teardown.py (removal, verified) and
observe.py (status, logs, leftovers). The lane id is deterministic (plan.lane_id), so a lane left up by
`labkit up` is found again by `labkit status/logs/down`. A recipe whose model.repo names a labkit-built model
is materialized (labkit.tinymodel) by the caller first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from labkit.nodes import (
    HostGroup,
    SshOptions,
    check_reachable,
    ending_as_interrupt,
    hosts_for_plan,
    ignoring_interrupts,
)
from labkit.recipe import LanePlan
from labkit.serve import observe, teardown
from labkit.serve import start as steps
from labkit.serve.checks import Preflight
from labkit.serve.engines import Engine, NodeLaunch, engine_for
from labkit.serve.errors import LaneBusy, LaneFailed
from labkit.serve.plan import Endpoint, lane_commands, launches, pin_revision
from labkit.serve.readyfacts import after_ready
from labkit.serve.runtimes import Runtime, runtime_for
from labkit.serve.state import LaneState, RunSink, Started
from labkit.serve.watch import wait_ready


class Lane:
    """One lane on its nodes. `up()` is the context manager; `start`/`down`/`status`/`logs` for the CLI."""

    def __init__(
        self,
        plan: LanePlan,
        group: HostGroup | None = None,
        ssh: SshOptions | None = None,
        sink: RunSink | None = None,
        progress: TextIO | None = sys.stderr,
        poll: float = 0.2,
        node_poll: float = 1.0,
        stop_grace: float = 10.0,
    ):
        group = group or hosts_for_plan(plan, ssh if ssh is not None else SshOptions.from_env())
        self.progress = progress
        self.state = LaneState(
            plan, group, engine_for(plan), runtime_for(plan, stop_grace), self.say, sink, poll, node_poll
        )
        #: what the start commands of the last start() left (labkit.serve.state.Started), None before one
        self.started: Started | None = None
        #: fabric addresses detected at the last start (nodes the recipe gives no `cluster.fabric.addresses` for)
        self.fabric_addresses: dict[str, str] = {}
        #: the pre-boot checks of the last start, None before one ran
        self.preflight: Preflight | None = None
        #: seconds per lifecycle step of the last start/down (check, start, ready, down), for benchmarks and records
        self.timings: dict[str, float] = {}

    # ------------------------------------------------------------------ the state, and pure views

    @property
    def plan(self) -> LanePlan:
        return self.state.plan

    @plan.setter
    def plan(self, plan: LanePlan) -> None:  # the model materialized, the revision pinned
        self.state = dataclasses.replace(self.state, plan=plan)

    @property
    def sink(self) -> RunSink | None:
        return self.state.sink

    @sink.setter
    def sink(self, sink: RunSink | None) -> None:
        self.state = dataclasses.replace(self.state, sink=sink)

    @property
    def group(self) -> HostGroup:
        return self.state.group

    @property
    def engine(self) -> Engine:
        return self.state.engine

    @property
    def runtime(self) -> Runtime:
        return self.state.runtime

    @property
    def lane_id(self) -> str:
        return self.state.lane_id

    @property
    def root_url(self) -> str:
        return self.state.root_url

    @property
    def started_at(self) -> float:
        """time.monotonic() when the start commands were issued (boot_seconds counts from here), 0 before."""
        return self.started.at if self.started is not None else 0.0

    def launches(self) -> list[NodeLaunch]:
        return launches(self.plan, self.group.hosts, self.fabric_addresses)

    def commands(self) -> dict[str, str]:
        return lane_commands(self.plan, self.group.hosts)

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
                            died = teardown.best_effort(
                                self.say, "checking which node died", self.dead_node_report
                            )
                    finally:
                        self.down()
                if died is not None:
                    raise died from failure

    def start(self) -> Endpoint:
        """Check nodes, start every node in parallel, wait for readiness. On any failure, remove everything."""
        steps.refuse_unbuilt_model(self.plan)
        t = time.monotonic()
        check_reachable(self.group)
        self.timings = {"check": time.monotonic() - t}
        self.plan = pin_revision(self.plan, self.group.head)
        self.refuse_if_present()
        self.preflight = steps.run_preflight(self.state, self.timings)
        steps.refuse_or_say(self.state, self.preflight)
        steps.device_probe(self.state, self.preflight)
        self.fabric_addresses = self.preflight.addresses
        self.say(
            f"lane {self.lane_id}: starting {self.plan.engine.kind} on {len(self.group)} node(s) "
            f"({', '.join(self.group.names)})"
        )
        if self.sink is not None:
            self.sink.open()
        try:
            with ending_as_interrupt():
                self.start_all()
                assert self.started is not None
                self.timings["start"] = self.started.elapsed()
                facts = wait_ready(self.state, self.started)
                self.timings["ready"] = facts.boot_seconds or self.started.elapsed()
                after_ready(self.state, self.preflight, facts)  # memory, the KV pool (outside the timer)
        except BaseException as e:
            with ignoring_interrupts():
                if isinstance(e, KeyboardInterrupt):
                    self.say("interrupted: removing the lane on every node")
                self.remove_after_failed_start()
            raise
        endpoint = steps.ready_endpoint(self.state, facts, self.preflight, self.fabric_addresses)
        if self.sink is not None:
            self.sink.boot(facts)
        self.say(f"lane {self.lane_id}: ready at {endpoint.base_url} after {facts.boot_seconds:.1f} s")
        return endpoint

    def down(self) -> None:
        """Remove the lane on every node and verify nothing is left; NodeError names any node that kept some.

        All of it runs with Ctrl-C/SIGTERM/SIGHUP ignored. Saving the logs first is best-effort: a full disk,
        a broken run folder or an unreachable node there never keeps the stop commands from running.
        """
        teardown.down(self.state, self.capture_logs, self.timings)

    def leftovers(self) -> dict[str, str]:
        """{node: what of this lane is still present} for nodes that are not clean."""
        return observe.leftovers(self.state)

    def status(self) -> dict[str, str]:
        """{node: alive | dead | absent}."""
        return observe.status(self.state)

    def logs(self, tail: int | None = None, nodes: list[str] | None = None) -> dict[str, str]:
        return observe.logs(self.state, tail, nodes)

    def follow(
        self,
        out: TextIO,
        nodes: list[str] | None = None,
        interval: float = 1.0,
        stop: threading.Event | None = None,
    ) -> None:
        """Print new log text from the nodes as it arrives (node-prefixed when several) until `stop` or Ctrl-C."""
        observe.follow(self.state, out, nodes, interval, stop)

    def check(self) -> None:
        """Raise LaneFailed (with the dead node's log tail) unless every node's engine is alive; for use between runs."""
        report = self.dead_node_report(attempts=1)
        if report is not None:
            raise report

    def ready(self) -> bool:
        """Whether the head answers every readiness probe now."""
        return observe.ready(self.state)

    def refuse_if_present(self) -> None:
        """LaneBusy unless nothing of this lane is on any node. Run before staging too: re-staging the view
        under a running engine would replace files it has open."""
        left = self.leftovers()
        if left:
            raise LaneBusy(
                f"lane {self.lane_id} already has something on {', '.join(left)}: "
                + "; ".join(f"{n}: {w}" for n, w in left.items())
                + f"\n  (nothing was started; `labkit down {self.plan.recipe}` removes it)"
            )

    # ------------------------------------------------------------------ steps (start/teardown call them here)

    def start_all(self) -> None:
        """Issue the start command on every node at once; returns when each has returned (NodeError names
        failures). `started` keeps the calls until the teardown has seen them all return."""
        self.started = steps.begin_start(self.state, self.fabric_addresses)
        steps.started_everywhere(self.state, self.started)

    def capture_logs(self) -> None:
        """Hand the rest of every node's log to the run sink before removal (see teardown.capture_logs)."""
        teardown.capture_logs(self.state, self.started.watched if self.started is not None else {})

    def dead_node_report(self, attempts: int = 4) -> LaneFailed | None:
        """After an error inside `with lane.up()`: name a node that died, with its log tail, if one did."""
        return teardown.dead_node_report(self.state, self.status, attempts)

    def remove_after_failed_start(self) -> None:
        """The teardown of a failed start, waiting for start commands still running (see teardown.py)."""
        calls = self.started.calls if self.started is not None else None
        if self.started is not None:
            self.started.calls = None
        teardown.remove_after_failed_start(self.state, calls, self.down_sparing)

    def down_sparing(self, busy: list[str]) -> None:
        """down() on a failure path, reaching the nodes in `busy` over spare connections; never raises."""
        with teardown.spare_connections(self.group, busy) as group:
            kept, self.state = self.state, self.state.with_group(group)
            try:
                teardown.teardown_quietly(self.say, self.down)
            finally:
                self.state = dataclasses.replace(self.state, group=kept.group)

    def say(self, text: str) -> None:
        """Progress text; a closed terminal (SSH session gone) or a closed pipe never stops the caller."""
        if self.progress is not None:
            try:
                print(text, file=self.progress, flush=True)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        self.group.close()
