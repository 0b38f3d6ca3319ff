"""What the start reads once the lane is ready (issue 16, item 3): the KV pool from the boot log and the API,
compared, in the boot facts and boot.json (simulator lanes of both flavours, and a hybrid layout whose sources
disagree); memory before the start and after ready on every node, read from the real /proc/meminfo of the four
sshd nodes; and what could not be read kept absent with its reason, never 0."""

from __future__ import annotations

import io
import json

from labkit.nodes import HostError
from labkit.nodes.local import LocalHost
from labkit.serve import Lane
from labkit.serve.checks import Preflight
from labkit.serve.readyfacts import AFTER_DROP, PREBOOT, before_start, memory_facts, read_meminfo
from labkit.serve.verdict import Check
from labkit.store import RunFolderSink
from tests.support.lanes import sim_recipe
from tests.support.serving import assert_clean_cluster, cluster_lane, served_plan

HYBRID = {"kv_cache_tokens": 1_179_770, "kv_gpu_blocks": 20_377, "kv_hybrid_block_size": 4}
MEMORY_KEYS = {"MemTotal", "MemFree", "MemAvailable", "Cached"}


def local_lane(tmp_path, port, **kw) -> Lane:
    plan = served_plan(sim_recipe(tmp_path / kw.pop("name", "lane"), port, **kw))
    return Lane(plan, sink=RunFolderSink(tmp_path / "run"), poll=0.1, stop_grace=3, progress=io.StringIO())


def boot_json(tmp_path) -> dict:
    return json.loads((tmp_path / "run" / "boot.json").read_text())


def assert_memory_read(entry: dict) -> None:
    """A node's memory at boot: both readings complete, the differences formed, nothing absent."""
    assert set(entry["before"]) == MEMORY_KEYS and set(entry["after_ready"]) == MEMORY_KEYS
    assert 0 < entry["after_ready"]["MemAvailable"] <= entry["after_ready"]["MemTotal"]
    assert entry["engine_took"] == entry["before"]["MemAvailable"] - entry["after_ready"]["MemAvailable"]
    assert entry["page_cache_grew"] == entry["after_ready"]["Cached"] - entry["before"]["Cached"]
    assert "absent" not in entry


def test_a_vllm_sim_lane_stores_the_pool_from_log_and_api_in_agreement(tmp_path, local_env):
    lane = local_lane(tmp_path, 18452)
    with lane.up() as ep:
        pool = ep.boot.kv_pool
        assert ep.boot.kv_pool_tokens == 100_000  # as before
    assert (pool["tokens"], pool["chosen"], pool["disagree"]) == (100_000, "log", False)
    assert set(pool["sources"]) == {"log", "cache_config_info"}
    assert "GPU KV cache size: 100,000 tokens" in pool["sources"]["log"]["raw"]
    cc = pool["sources"]["cache_config_info"]
    assert (cc["num_gpu_blocks"], cc["block_size"], cc["kv_cache_size_tokens"]) == (6250, 16, 100_000)
    assert cc["labels"]["simulated"] == "true"
    assert pool["absent"] == {"server_info": "/server_info: HTTP 404"}
    doc = boot_json(tmp_path)
    assert doc["kv_pool"] == pool and doc["kv_pool_tokens"] == 100_000
    assert_memory_read(doc["memory_at_boot"]["localhost"])
    assert doc["memory_at_boot"]["localhost"]["before_source"] == PREBOOT
    said = lane.progress.getvalue()
    assert "KV pool: 100,000 tokens (log); " in said and "memory localhost: MemAvailable " in said


def test_a_hybrid_layout_lane_flags_the_disagreement_and_names_both_numbers(tmp_path, local_env):
    lane = local_lane(tmp_path, 18453, settings=HYBRID)
    with lane.up() as ep:
        pool = ep.boot.kv_pool
    assert pool["disagree"] and pool["tokens"] == 1_179_770 and pool["chosen"] == "log"
    assert pool["figures"]["cache_config_info.num_gpu_blocks*block_size"] == 81_508
    assert (
        "20,377 * 4 = 81,508" in pool["message"]
        and "labkit reports 1,179,770 tokens (log)" in pool["message"]
    )
    assert boot_json(tmp_path)["kv_pool"]["disagree"] is True
    assert "warning: KV pool sources disagree: " in lane.progress.getvalue()


def test_an_sglang_sim_lane_stores_both_log_lines_server_info_and_the_gauge(tmp_path, local_env):
    lane = local_lane(tmp_path, 18454, flavor="sglang")
    with lane.up() as ep:
        pool = ep.boot.kv_pool
    assert set(pool["sources"]) == {"log", "log_allocated", "server_info", "metrics_gauge"}
    assert "max_total_num_tokens=100000" in pool["sources"]["log"]["raw"]
    assert "#tokens: 100000" in pool["sources"]["log_allocated"]["raw"]
    assert pool["sources"]["server_info"]["raw"]["max_total_num_tokens"] == 100_000
    assert not pool["disagree"] and pool["tokens"] == 100_000 and "absent" not in pool


def test_memory_before_and_after_ready_on_every_one_of_four_nodes(cluster, tmp_path):
    cluster.reset_shims()
    lane = cluster_lane(cluster, tmp_path, 18455, engine="drop_caches = true")
    try:
        with lane.up() as ep:
            memory = ep.boot.memory_at_boot
            checks = {c["node"]: c for c in ep.boot.preflight if c["check"] == "page cache"}
        assert_clean_cluster(lane, cluster)
    finally:
        lane.close()
    assert set(memory) == set(cluster.addresses)
    for addr in cluster.addresses:
        assert_memory_read(memory[addr])
        dropped = checks[addr]["facts"]["dropped"]
        assert memory[addr]["before_source"] == (AFTER_DROP if dropped else PREBOOT)
        if dropped:
            assert memory[addr]["before"] == checks[addr]["facts"]["after"]
    assert boot_json(tmp_path)["memory_at_boot"] == memory


def test_what_could_not_be_read_is_absent_with_its_reason():
    read = {"MemTotal": 100, "MemFree": 10, "MemAvailable": 60, "Cached": 30}
    after = {"MemTotal": 100, "MemFree": 5, "MemAvailable": 40}  # no Cached
    facts = memory_facts(
        {"a": (read, PREBOOT), "b": "cannot read memory: Permission denied"},
        {"a": after, "b": "dgx6: ssh: connect to host: Connection refused"},
        ["a", "b", "c"],
    )
    assert facts["a"]["engine_took"] == 20 and "page_cache_grew" not in facts["a"]
    assert facts["a"]["absent"] == {"page_cache_grew": "needs Cached before the start and after ready"}
    assert facts["b"]["absent"]["before"] == "cannot read memory: Permission denied"
    assert facts["b"]["absent"]["after_ready"] == "dgx6: ssh: connect to host: Connection refused"
    assert "before" not in facts["b"] and "engine_took" not in facts["b"]
    assert facts["c"]["absent"]["before"] == "no pre-boot reading"
    assert all(v != 0 for entry in facts.values() for v in entry.values())


def test_before_the_start_is_the_reading_after_a_page_cache_drop_when_there_was_one():
    pre = {"MemTotal": 100, "MemAvailable": 50, "Cached": 40}
    after_drop = {"MemTotal": 100, "MemAvailable": 80, "Cached": 5}
    report = Preflight(
        [
            Check("a", "memory", "ok", "MemAvailable ...", pre),
            Check("a", "page cache", "ok", "dropped", {"dropped": True, "before": pre, "after": after_drop}),
            Check("b", "memory", "ok", "MemAvailable ...", pre),
            Check("b", "page cache", "warn", "not dropped", {"dropped": False, "before": pre, "after": {}}),
            Check("c", "memory", "warn", "cannot read memory: no MemAvailable in /proc/meminfo"),
        ]
    )
    assert before_start(report) == {
        "a": (after_drop, AFTER_DROP),
        "b": (pre, PREBOOT),
        "c": "cannot read memory: no MemAvailable in /proc/meminfo",
    }


class Unreachable(LocalHost):
    def run(self, cmd, timeout=None, stdin=None):
        raise HostError(self.name, "ssh: connect to host dgx6 port 22: Connection refused")


def test_a_node_that_cannot_be_asked_gives_its_reason_and_a_real_one_its_meminfo():
    assert read_meminfo(Unreachable()).endswith("Connection refused")
    info = read_meminfo(LocalHost())
    assert set(info) == MEMORY_KEYS and info["MemAvailable"] > 0
