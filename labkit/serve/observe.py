"""What of a lane is on its nodes now, read only: each node's state, what is left after a removal, its logs
(the end, or followed as they grow) and whether the head answers the readiness probes. `labkit status`,
`logs` and the teardown's verification read these; nothing here starts or removes anything.
"""

from __future__ import annotations

import threading
from typing import TextIO

from labkit.serve.runtimes import ABSENT
from labkit.serve.state import LaneState
from labkit.serve.watch import http_status


def leftovers(lane: LaneState) -> dict[str, str]:
    """{node: what of this lane is still present} for nodes that are not clean."""
    out = lane.group.run(lane.runtime.leftovers_command(), f"listing lane {lane.lane_id}", timeout=60)
    return {n: r.stdout.strip() for n, r in out.items() if r.stdout.strip()}


def status(lane: LaneState) -> dict[str, str]:
    """{node: alive | dead | absent}."""
    out = lane.group.run(
        lambda h: lane.runtime.alive_command(h.name), f"status of lane {lane.lane_id}", timeout=60
    )
    return {n: (r.stdout.strip().splitlines() or [ABSENT])[0] for n, r in out.items()}


def logs(lane: LaneState, tail: int | None = None, nodes: list[str] | None = None) -> dict[str, str]:
    """{node: its engine log} (the last `tail` lines), of every node or those in `nodes`."""
    hosts = [h for h in lane.group if nodes is None or h.name in nodes]
    return lane.group.map(
        lambda h: h.run(lane.runtime.logs_command(h.name, tail=tail), timeout=120).stdout,
        f"logs of lane {lane.lane_id}",
        hosts,
    )


def follow(
    lane: LaneState,
    out: TextIO,
    nodes: list[str] | None = None,
    interval: float = 1.0,
    stop: threading.Event | None = None,
) -> None:
    """Print new log text from the nodes as it arrives (node-prefixed when several) until `stop` or Ctrl-C."""
    hosts = [h for h in lane.group if nodes is None or h.name in nodes]
    offsets = {h.name: 0 for h in hosts}
    partial = {h.name: "" for h in hosts}
    stop = stop or threading.Event()
    while not stop.is_set():
        texts = lane.group.map(
            lambda h: h.run(lane.runtime.logs_command(h.name, offset=offsets[h.name]), timeout=60).stdout,
            f"logs of lane {lane.lane_id}",
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


def ready(lane: LaneState) -> bool:
    """Whether the head answers every readiness probe now."""
    return all(http_status(lane.root_url + p.path) == p.status for p in lane.engine.probes(lane.plan))
