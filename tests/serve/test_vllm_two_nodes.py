"""vLLM native multi-node for real: TP2 of the tiny model over two sshd nodes (127.0.0.2 and .3), booted by
`lane.up()` exactly as the four-node DGX Spark lanes are (`vllm serve ... --nnodes 2 --node-rank 0|1
--master-addr <head> [--headless]`, each node's own address as VLLM_HOST_IP), measured, and torn down.
"""

from __future__ import annotations

import pytest

from labkit import tinymodel
from labkit.measure import BenchOptions, run_bench
from labkit.serve import Lane
from labkit.store import RunFolderSink
from tests.support.vllm import vllm_available
from tests.support.vllm_lanes import free_port, two_node_recipe

pytestmark = pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")


def test_tp2_over_two_nodes_boots_serves_and_leaves_nothing(cluster, tmp_path, tmp_path_factory):
    model = tinymodel.ensure(
        "tiny-llama", root=tmp_path_factory.getbasetemp() / "labkit-cache" / "models", fmt="hf"
    )
    head, worker = cluster.addresses[:2]
    plan = two_node_recipe(tmp_path / "lane", free_port(), (head, worker), cluster.port, cluster.user, model)
    lane = Lane(
        plan, ssh=cluster.ssh_options(), sink=RunFolderSink(tmp_path / "run"), poll=0.2, stop_grace=10
    )
    try:
        with lane.up() as ep:
            # the fabric addresses were detected on the nodes (their `ip` shim) and used for the rendezvous
            assert ep.boot.fabric[worker] == {
                "interface": "lo",
                "address": worker,
                "source": "detected at boot",
            }
            launches = {ln.node: ln for ln in lane.launches()}
            for rank, node in enumerate((head, worker)):
                argv, env = list(launches[node].argv), dict(launches[node].env)
                assert argv[:2] == ["vllm", "serve"] and env["VLLM_HOST_IP"] == node
                assert env["GLOO_SOCKET_IFNAME"] == "lo"
                assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
                assert argv[argv.index("--nnodes") + 1] == "2" and argv[argv.index("--node-rank") + 1] == str(
                    rank
                )
                assert argv[argv.index("--master-addr") + 1] == head
                assert ("--headless" in argv) == (rank == 1)
            assert ep.base_url == f"http://{head}:{plan.engine.port}/v1"
            assert set(lane.status().values()) == {"alive"}
            assert ep.boot.engine_version.startswith("0.32") and ep.boot.kv_pool_tokens > 0
            # each node's transport, from its own log: vLLM CPU's ranks use gloo over `lo` (serve.transport)
            assert {n: t["kind"] for n, t in ep.boot.transport.items()} == {head: "gloo", worker: "gloo"}
            assert "world_size=2" in ep.boot.transport[worker]["line"]
            # and the state each node booted in: its kernel and vLLM's own compile cache (files or absent)
            assert set(ep.boot.state) == {head, worker}
            for node in (head, worker):
                state = ep.boot.state[node]
                assert state["kernel"] and "vllm" in state["caches"] and state["cold"] in ([], ["vllm"])
            result = run_bench(
                ep.base_url, plan.measure, BenchOptions(model=ep.model, progress=False, lane=plan.recipe)
            )
            assert len(cluster.processes()) >= 2  # API server + engine on the head, worker on the other
        recs = result.records
        assert recs and all(r.ok for r in recs), [r.error for r in recs if not r.ok]
        assert result.summary.measures["prefill_1024"] > 0
        worker_log = (tmp_path / "run" / "logs" / f"{worker}.log").read_text(errors="replace")
        head_log = (tmp_path / "run" / "logs" / f"{head}.log").read_text(errors="replace")
        assert "world_size=2" in head_log and "headless" in worker_log.lower()
        assert set(lane.status().values()) == {"absent"} and lane.leftovers() == {}
        assert cluster.processes() == []
    finally:
        lane.close()
