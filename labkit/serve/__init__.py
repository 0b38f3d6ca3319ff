"""Step 3, up and teardown: a `LanePlan` and its hosts in, a ready endpoint out; down removes the lane on
every node and verifies it.

`engines/` are pure builders of each node's command plus boot-log parsers; `runtimes` run them as docker
containers or processes; `fabric` gives each node its fabric address and the NCCL/GLOO/TP env; `plan` computes each node's command and pins the model revision; `lane` composes
`start`, `watch` (the boot to readiness) and `teardown`; `errors` say which node failed and why. The plan
comes in with a labkit-built model already materialized (labkit.tinymodel, by the caller).
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
from labkit.serve.errors import BootError, BootTimeout, LaneBusy, LaneFailed
from labkit.serve.fabric import fabric_env, node_addresses, parse_address
from labkit.serve.lane import Lane
from labkit.serve.plan import Endpoint, lane_commands, launches, pin_revision
from labkit.serve.runtimes import DockerRuntime, ProcessRuntime

__all__ = [
    "BootError",
    "BootFacts",
    "BootLog",
    "BootTimeout",
    "DockerRuntime",
    "Endpoint",
    "Engine",
    "Lane",
    "LaneBusy",
    "LaneFailed",
    "LlamaCpp",
    "NodeLaunch",
    "NodeSpec",
    "ProcessRuntime",
    "Sglang",
    "Sim",
    "Vllm",
    "engine_for",
    "fabric_env",
    "lane_commands",
    "launches",
    "node_addresses",
    "parse_address",
    "pin_revision",
]
