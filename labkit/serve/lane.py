"""Serving a lane: start the engine on every node, wait until it is really ready, always tear it down.

    lane = Lane(plan, run_dir=folder)
    with lane.up() as endpoint:          # every node checked, started in parallel, readiness awaited
        client(endpoint.base_url, endpoint.model)
    # here every container/process of the lane is gone on every node, and that was verified

`Lane` holds the lane's state and composes its steps: start.py (check, start, readiness), watch.py (the boot
watch: readiness probe, node liveness, boot-log lines) and teardown.py (removal, verified). The lane id is
deterministic (plan.lane_id), so a lane left up by `labkit up` is found again by `labkit status/logs/down`.
A recipe whose model.repo names a labkit-built model is materialized (labkit.tinymodel) by the caller first.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from labkit.nodes import (
    HostGroup,
    NodeCalls,
    SshOptions,
    ending_as_interrupt,
    hosts_for_plan,
    ignoring_interrupts,
)
from labkit.serve.engines import Engine, NodeLaunch, engine_for
from labkit.serve.errors import LaneBusy, LaneFailed
from labkit.serve.plan import Endpoint, lane_commands, launches
from labkit.serve.runtimes import ABSENT, Runtime, runtime_for
from labkit.serve.start import start as start_lane
from labkit.serve.start import start_all as start_nodes
from labkit.serve.teardown import best_effort
from labkit.serve.teardown import capture_logs as capture_node_logs
from labkit.serve.teardown import dead_node_report as find_dead_node
from labkit.serve.teardown import down as remove_lane
from labkit.serve.watch import NodeWatch, http_status


class Lane:
    """One lane on its nodes. `up()` is the context manager; `start`/`down`/`status`/`logs` for the CLI."""

    def __init__(
        self,
        plan,
        group: HostGroup | None = None,
        ssh: SshOptions | None = None,
        run_dir: str | Path | None = None,
        progress: TextIO | None = sys.stderr,
        poll: float = 0.2,
        node_poll: float = 1.0,
        stop_grace: float = 10.0,
    ):
        self.plan = plan
        self.group = group or hosts_for_plan(plan, ssh if ssh is not None else SshOptions.from_env())
        self.engine: Engine = engine_for(plan)
        self.runtime: Runtime = runtime_for(plan, stop_grace)
        self.run_dir = Path(run_dir) if run_dir else None
        self.progress = progress
        self.poll = poll
        self.node_poll = node_poll
        self.lane_id = plan.lane_id
        #: the boot watch's per-node state of the last start(); the teardown takes each node's log over from it
        self.watched: dict[str, NodeWatch] = {}
        self.starts: NodeCalls | None = (
            None  # the start commands of the last start(), until they all returned
        )
        #: time.monotonic() when the start commands were issued (boot_seconds counts from here)
        self.started_at = 0.0
        #: fabric addresses detected at the last start (nodes the recipe gives no `cluster.fabric.addresses` for)
        self.fabric_addresses: dict[str, str] = {}
        #: the pre-boot checks of the last start (labkit.serve.checks.Preflight), None before one ran
        self.preflight = None
        #: seconds per lifecycle step of the last start/down (check, start, ready, down), for benchmarks and records
        self.timings: dict[str, float] = {}

    # ------------------------------------------------------------------ pure views

    def launches(self) -> list[NodeLaunch]:
        return launches(self.plan, self.group.hosts, self.fabric_addresses)

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
                            died = best_effort(self, "checking which node died", self.dead_node_report)
                    finally:
                        self.down()
                if died is not None:
                    raise died from failure

    def start(self) -> Endpoint:
        """Check nodes, start every node in parallel, wait for readiness. On any failure, remove everything."""
        return start_lane(self)

    def down(self) -> None:
        """Remove the lane on every node and verify nothing is left; NodeError names any node that kept some.

        All of it runs with Ctrl-C/SIGTERM/SIGHUP ignored. Saving the logs first is best-effort: a full disk,
        a broken run folder or an unreachable node there never keeps the stop commands from running.
        """
        remove_lane(self)

    def leftovers(self) -> dict[str, str]:
        """{node: what of this lane is still present} for nodes that are not clean."""
        out = self.group.run(self.runtime.leftovers_command(), f"listing lane {self.lane_id}", timeout=60)
        return {n: r.stdout.strip() for n, r in out.items() if r.stdout.strip()}

    def status(self) -> dict[str, str]:
        """{node: alive | dead | absent}."""
        out = self.group.run(
            lambda h: self.runtime.alive_command(h.name), f"status of lane {self.lane_id}", timeout=60
        )
        return {n: (r.stdout.strip().splitlines() or [ABSENT])[0] for n, r in out.items()}

    def logs(self, tail: int | None = None, nodes: list[str] | None = None) -> dict[str, str]:
        hosts = [h for h in self.group if nodes is None or h.name in nodes]
        out = self.group.map(
            lambda h: h.run(self.runtime.logs_command(h.name, tail=tail), timeout=120).stdout,
            f"logs of lane {self.lane_id}",
            hosts,
        )
        return out

    def follow(
        self,
        out: TextIO,
        nodes: list[str] | None = None,
        interval: float = 1.0,
        stop: threading.Event | None = None,
    ) -> None:
        """Print new log text from the nodes as it arrives (node-prefixed when several) until `stop` or Ctrl-C."""
        hosts = [h for h in self.group if nodes is None or h.name in nodes]
        offsets = {h.name: 0 for h in hosts}
        partial = {h.name: "" for h in hosts}
        stop = stop or threading.Event()
        while not stop.is_set():
            texts = self.group.map(
                lambda h: h.run(self.runtime.logs_command(h.name, offset=offsets[h.name]), timeout=60).stdout,
                f"logs of lane {self.lane_id}",
                hosts,
            )
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
        report = self.dead_node_report(attempts=1)
        if report is not None:
            raise report

    def ready(self) -> bool:
        """Whether the head answers every readiness probe now."""
        return all(http_status(self.root_url + p.path) == p.status for p in self.engine.probes(self.plan))

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
        """Issue the start command on every node at once; returns when each has returned (see start.start_all)."""
        start_nodes(self)

    def capture_logs(self) -> None:
        """Save the rest of every node's log into the run folder before removal (see teardown.capture_logs)."""
        capture_node_logs(self)

    def dead_node_report(self, attempts: int = 4) -> LaneFailed | None:
        """After an error inside `with lane.up()`: name a node that died, with its log tail, if one did."""
        return find_dead_node(self, attempts)

    def elapsed(self) -> float:
        """Seconds since the start commands were issued."""
        return time.monotonic() - self.started_at

    def say(self, text: str) -> None:
        """Progress text; a closed terminal (SSH session gone) or a closed pipe never stops the caller."""
        if self.progress is not None:
            try:
                print(text, file=self.progress, flush=True)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        self.group.close()
