"""The simulator states its KV pool the ways the engines do, with known truth (issue 16, item 3): vLLM's
`vllm:cache_config_info` carries num_gpu_blocks, block_size and (unless switched off) kv_cache_size_tokens; a
hybrid layout labels its smallest group's block size, so blocks x block size is no longer the logged count;
the SGLang flavour answers max_total_num_tokens on /server_info and as a gauge, like its log lines."""

from __future__ import annotations

import pytest

from labkit.serve import parse_prometheus
from labkit.sim.config import SimConfigError, build_config
from tests.support.sim import SimProc, get_json, request


def cache_info(port: int) -> dict[str, str]:
    status, body = request(port, "GET", "/metrics")
    assert status == 200
    [(labels, value)] = parse_prometheus(body.decode())["vllm:cache_config_info"]
    assert value == 1.0
    return labels


def test_cache_config_info_has_the_pools_true_blocks_size_and_tokens():
    with SimProc(["--preset", "test"]) as p:
        labels = cache_info(p.port)
        logged = p.wait_line("KV cache size:")
    assert "GPU KV cache size: 100,000 tokens" in logged
    assert (labels["num_gpu_blocks"], labels["block_size"], labels["kv_cache_size_tokens"]) == (
        "6250",
        "16",
        "100000",
    )
    assert labels["engine"] == "0" and labels["simulated"] == "true"


def test_a_hybrid_layout_labels_its_smallest_block_and_older_builds_have_no_token_label():
    # DeepSeek-V4 as vllm-project/vllm#51163 shows it: logged 1,179,770 tokens, 20,377 blocks of "4"
    args = ["--set", "kv_cache_tokens=1179770", "kv_gpu_blocks=20377", "kv_hybrid_block_size=4"]
    with SimProc(["--preset", "test", *args]) as p:
        labels = cache_info(p.port)
        logged = p.wait_line("KV cache size:")
    assert "GPU KV cache size: 1,179,770 tokens" in logged
    assert (labels["num_gpu_blocks"], labels["block_size"], labels["kv_cache_size_tokens"]) == (
        "20377",
        "4",
        "1179770",
    )
    assert int(labels["num_gpu_blocks"]) * int(labels["block_size"]) == 81_508
    with SimProc(["--preset", "test", "--set", "kv_tokens_label=false", "kv_hybrid_block_size=4"]) as p:
        labels = cache_info(p.port)
    assert "kv_cache_size_tokens" not in labels
    assert (labels["num_gpu_blocks"], labels["block_size"]) == ("6250", "4")  # 100,000 // 16 pool blocks


def test_negative_kv_settings_are_refused_with_the_key():
    for key in ("kv_gpu_blocks", "kv_hybrid_block_size"):
        with pytest.raises(SimConfigError, match=key):
            build_config("test", sets=[f"{key}=-1"])


def test_sglang_flavour_answers_max_total_num_tokens_on_server_info_and_as_a_gauge():
    with SimProc(["--preset", "test", "--flavor", "sglang"]) as p:
        info = get_json(p.port, "/server_info")
        status, body = request(p.port, "GET", "/metrics")
        lines = [p.wait_line("#tokens:"), p.wait_line("max_total_num_tokens=")]
    assert info["max_total_num_tokens"] == 100_000
    assert info["internal_states"][0]["memory_usage"]["token_capacity"] == 100_000
    assert status == 200
    [(_, gauge)] = parse_prometheus(body.decode())["sglang:max_total_num_tokens"]
    assert gauge == 100_000
    assert "#tokens: 100000," in lines[0] and "max_total_num_tokens=100000," in lines[1]


def test_vllm_flavour_has_no_server_info_as_vllm_without_dev_mode():
    with SimProc(["--preset", "test"]) as p:
        assert request(p.port, "GET", "/server_info")[0] == 404
