"""Step 3, up and teardown: a `LanePlan` and its hosts in, a ready endpoint out; down removes the lane on
every node and verifies it.

`engines/` builds each node's command and parses its boot log, a runtime runs it (docker or a process group),
and `Lane` composes the start, the boot watch, the teardown and the observation, which share a frozen `LaneState`
and return what they learned; the pre-boot checks and `labkit doctor` are pure commands and parsers run on every
node at once. What a run folder keeps goes to the caller's `RunSink` (labkit.store writes it). The plan comes in
with a labkit-built model already materialized (labkit.tinymodel, by the caller).

Its modules, each with what it is for: docs/architecture.md, "Packages" (generated from their docstrings).
"""

from labkit.serve.bandwidth import Measured
from labkit.serve.bandwidth_run import measure_bandwidth, store_fabric, stored_fabric
from labkit.serve.bootstate import cold_cache_flags
from labkit.serve.checks import doctor
from labkit.serve.engines import BootFacts
from labkit.serve.envcheck import EnvLever, check_env, split_levers
from labkit.serve.flagcheck import check_flags
from labkit.serve.headers_run import read_headers, store_headers
from labkit.serve.kvsources import Fetched, api_sources, kv_pool
from labkit.serve.lane import Lane
from labkit.serve.plan import Endpoint, lane_commands
from labkit.serve.prometheus import Samples, parse_prometheus
from labkit.serve.transport import socket_fallback_flags
from labkit.serve.verdict import Check, node_tables

__all__ = [
    "BootFacts",
    "Check",
    "Endpoint",
    "EnvLever",
    "Fetched",
    "Lane",
    "Measured",
    "Samples",
    "api_sources",
    "check_env",
    "check_flags",
    "cold_cache_flags",
    "doctor",
    "kv_pool",
    "lane_commands",
    "measure_bandwidth",
    "node_tables",
    "parse_prometheus",
    "read_headers",
    "socket_fallback_flags",
    "split_levers",
    "store_fabric",
    "store_headers",
    "stored_fabric",
]
