"""Step 3, up and teardown: a `LanePlan` and its hosts in, a ready endpoint out; down removes the lane on
every node and verifies it.

`engines/` are pure builders of each node's command plus boot-log parsers; `runtimes` run them as docker
containers or processes; `fabric` gives each node its fabric address and the NCCL/GLOO/TP env; `plan` computes
each node's command and pins the model revision (reading one ref on the head); `lane` composes `start`,
`watch` (the boot to readiness), `teardown` and `observe` (status, logs), which share a `LaneState` and return
what they learned (`state`); what a run folder keeps goes to the caller's `RunSink` (labkit.store writes it);
`errors` say which node failed and why. The pre-boot
checks (image, fabric, RDMA, memory, GPU, page cache) are pure in `preflight`, `holders`, `enginehelp` and
`verdict`, run by `checks`, which also runs `labkit doctor` (`doctor`); `flagcheck` checks given flags (a
sweep's) against the engine's own --help, else the adapter's known flags (`check_flags`). Once ready, `readyfacts` reads memory
on every node and the KV pool from the head's API; `kvsources` compares the pool's sources (pure; the bench
reads a bare endpoint's pool through it too) and `prometheus` parses /metrics text (labkit.measure re-exports
it). The plan comes in with a labkit-built model already materialized (labkit.tinymodel, by the caller).
"""

from labkit.serve.checks import Preflight, doctor, preflight
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
from labkit.serve.errors import BootError, BootTimeout, LaneBusy, LaneFailed, PreflightFailed
from labkit.serve.fabric import fabric_env, node_addresses, parse_address
from labkit.serve.flagcheck import check_flags
from labkit.serve.kvsources import (
    Fetched,
    api_sources,
    cache_config_source,
    gauge_source,
    kv_pool,
    server_info_source,
)
from labkit.serve.lane import Lane
from labkit.serve.plan import Endpoint, lane_commands, launches, pin_revision
from labkit.serve.prometheus import Samples, parse_prometheus
from labkit.serve.runtimes import DockerRuntime, ProcessRuntime
from labkit.serve.state import LaneState, RunSink
from labkit.serve.verdict import FAIL, OK, SKIP, WARN, Check, check_table, node_tables

__all__ = [
    "FAIL",
    "OK",
    "SKIP",
    "WARN",
    "BootError",
    "BootFacts",
    "BootLog",
    "BootTimeout",
    "Check",
    "DockerRuntime",
    "Endpoint",
    "Engine",
    "Fetched",
    "Lane",
    "LaneBusy",
    "LaneFailed",
    "LaneState",
    "LlamaCpp",
    "NodeLaunch",
    "NodeSpec",
    "Preflight",
    "PreflightFailed",
    "ProcessRuntime",
    "RunSink",
    "Samples",
    "Sglang",
    "Sim",
    "Vllm",
    "api_sources",
    "cache_config_source",
    "check_flags",
    "check_table",
    "doctor",
    "engine_for",
    "fabric_env",
    "gauge_source",
    "kv_pool",
    "lane_commands",
    "launches",
    "node_addresses",
    "node_tables",
    "parse_address",
    "parse_prometheus",
    "pin_revision",
    "preflight",
    "server_info_source",
]
