"""What the serve steps share and what they hand back: `LaneState` (the plan, its hosts, engine, runtime, the
run sink and the progress callback) is read by start, watch, teardown and checks; `Started` is what the start
commands left (when they were issued, each node's boot watch, the calls until they returned).

The steps never write into a run folder: what a run folder keeps (node logs, boot facts) goes to a `RunSink`
the caller gives, labkit.store.RunFolderSink for a measured lane.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from labkit.nodes import Host, HostGroup, NodeCalls
from labkit.recipe import LanePlan
from labkit.serve.engines import BootFacts, BootLog, BootPhase, Engine, NodeLaunch
from labkit.serve.runtimes import ABSENT, Runtime


class RunSink(Protocol):
    """Where a lane's node logs and boot facts go (a run folder): `open` before the start commands,
    `node_log` for each node's new log text as the lane reads it, `boot` once the lane is ready."""

    def open(self) -> None: ...

    def node_log(self, node: str, text: str) -> None: ...

    def boot(self, facts: BootFacts) -> None: ...


@dataclass(frozen=True)
class LaneState:
    """One lane as the serve steps see it. `say` is the progress callback; `sink` None keeps nothing."""

    plan: LanePlan
    group: HostGroup
    engine: Engine
    runtime: Runtime
    say: Callable[[str], None]
    sink: RunSink | None = None
    poll: float = 0.2  # seconds between readiness probes of the head
    node_poll: float = 1.0  # seconds between the boot watch's node round trips

    @property
    def lane_id(self) -> str:
        return self.plan.lane_id

    @property
    def head_address(self) -> str:
        return self.plan.cluster.head_address or self.group.head.address

    @property
    def root_url(self) -> str:
        return f"http://{self.head_address}:{self.plan.engine.port}"

    def with_group(self, group: HostGroup) -> LaneState:
        return dataclasses.replace(self, group=group)


@dataclass
class NodeWatch:
    """One node during boot: its launch, its log parser, how far its log was read, and what it showed."""

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


@dataclass
class Started:
    """What the start commands left: when they were issued (time.monotonic(), boot_seconds counts from
    here), each node's boot watch (the teardown takes each node's log over from it) and the calls, kept
    until the teardown has seen them all return (a start command cannot be recalled)."""

    at: float
    watched: dict[str, NodeWatch]
    calls: NodeCalls[str] | None = None

    def elapsed(self) -> float:
        """Seconds since the start commands were issued."""
        return time.monotonic() - self.at
