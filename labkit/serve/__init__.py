"""Step 3, up and teardown: a `LanePlan` and its hosts in, a ready endpoint out; down removes the lane on
every node and verifies it.

`engines/` are pure builders of each node's command plus boot-log parsers; `runtimes` run them as docker
containers or processes; `fabric` gives each node its fabric address and the NCCL/GLOO/TP env; `plan` computes
each node's command and pins the model revision (reading one ref on the head); `lane` composes `start`,
`watch` (the boot to readiness), `teardown` and `observe` (status, logs), which share a `LaneState` and return
what they learned (`state`); what a run folder keeps goes to the caller's `RunSink` (labkit.store writes it);
`errors` say which node failed and why; `transport` reads which network NCCL (or gloo) used from every
node's boot log, for the boot facts and the `socket-fallback` flag. The pre-boot
checks (image, fabric, RDMA, memory, GPU, page cache) are pure in `preflight`, `bootstate` (kernel, driver,
CUDA, firmware and compile-cache state, and the `cold-compile-cache` flag), `netcheck` (the fabric's subnet
and MTU across interfaces and nodes), `reach` (every node to the head's rendezvous address: a switchless ring
fails it), `cabling` (RoCE ports cabled point to point under a switch topology), `holders`, `enginehelp` and
`verdict`, run by `checks` (the reach probes and the cabling check by `reach_run`), which also runs `labkit doctor` (`doctor`); `bandwidth` (the ib_write_bw and all_reduce_perf commands and
parsers, pure) and `bandwidth_run` (run on the nodes) are `labkit doctor --bandwidth`; `flagcheck` checks given flags (a
sweep's) against the engine's own --help, else the adapter's known flags (`check_flags`). Once ready, `readyfacts` reads memory
on every node and the KV pool from the head's API; `kvsources` compares the pool's sources (pure; the bench
reads a bare endpoint's pool through it too) and `prometheus` parses /metrics text (labkit.measure re-exports
it). The plan comes in with a labkit-built model already materialized (labkit.tinymodel, by the caller).
"""

from labkit.serve.bandwidth_run import measure_bandwidth
from labkit.serve.bootstate import cold_cache_flags
from labkit.serve.checks import doctor
from labkit.serve.engines import BootFacts
from labkit.serve.flagcheck import check_flags
from labkit.serve.kvsources import Fetched, api_sources, kv_pool
from labkit.serve.lane import Lane
from labkit.serve.plan import Endpoint, lane_commands
from labkit.serve.prometheus import Samples, parse_prometheus
from labkit.serve.transport import socket_fallback_flags
from labkit.serve.verdict import node_tables

__all__ = [
    "BootFacts",
    "Endpoint",
    "Fetched",
    "Lane",
    "Samples",
    "api_sources",
    "check_flags",
    "cold_cache_flags",
    "doctor",
    "kv_pool",
    "lane_commands",
    "measure_bandwidth",
    "node_tables",
    "parse_prometheus",
    "socket_fallback_flags",
]
