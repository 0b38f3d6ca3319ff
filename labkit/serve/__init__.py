"""Step 3, up and teardown: a `LanePlan` and its hosts in, a ready endpoint out; down removes the lane on
every node and verifies it.

`engines/` are pure builders of each node's command plus boot-log parsers; `runtimes` run them as docker
containers or processes; the lane starts, watches and tears down.
"""

from labkit.serve.engines import (
    BootFacts,
    BootLog,
    Engine,
    LlamaCpp,
    NodeLaunch,
    NodeSpec,
    Sglang,
    Sim,
    Vllm,
    engine_for,
)
from labkit.serve.lane import (
    BootError,
    BootTimeout,
    Endpoint,
    Lane,
    LaneBusy,
    LaneFailed,
    lane_commands,
    pin_revision,
)
from labkit.serve.runtimes import DockerRuntime, ProcessRuntime

__all__ = [
    "BootError", "BootFacts", "BootLog", "BootTimeout", "DockerRuntime", "Endpoint", "Engine", "Lane", "LaneBusy",
    "LaneFailed", "LlamaCpp", "NodeLaunch", "NodeSpec", "ProcessRuntime", "Sglang", "Sim", "Vllm", "engine_for",
    "lane_commands", "pin_revision",
]
