"""`read_kv_pool` (issue 16, item 3): the KV pool of an endpoint measured by URL, read from its API through the
StreamClient, against real simulator servers of both flavours, a hybrid layout whose sources disagree, and an
endpoint that answers nothing; a lane's boot-log sources join when the caller hands them over."""

from __future__ import annotations

import asyncio

from labkit.measure.request.client import StreamClient
from labkit.measure.server.kvpool import NO_LOG, read_kv_pool
from tests.support.sim import SimProc
from tests.support.workers import free_port


def pool_of(url: str, log: dict | None = None) -> dict:
    async def go() -> dict:
        async with StreamClient(url, timeout=30) as client:
            return await read_kv_pool(client, log)

    return asyncio.run(go())


def test_a_vllm_endpoint_by_url_reports_cache_config_info_and_says_it_has_no_log():
    with SimProc(["--preset", "test"]) as p:
        pool = pool_of(p.url + "/v1")
    assert (pool["tokens"], pool["chosen"], pool["disagree"]) == (
        100_000,
        "cache_config_info.kv_cache_size_tokens",
        False,
    )
    assert pool["sources"]["cache_config_info"]["num_gpu_blocks"] == 6250
    assert pool["absent"] == {"server_info": "/server_info: HTTP 404", "log": NO_LOG}


def test_a_hybrid_endpoint_disagrees_and_a_boot_logs_figure_is_preferred():
    args = ["--set", "kv_cache_tokens=1179770", "kv_gpu_blocks=20377", "kv_hybrid_block_size=4"]
    with SimProc(["--preset", "test", *args]) as p:
        log = {"log": {"tokens": 1_179_770, "raw": p.wait_line("KV cache size:"), "line": "kv_tokens"}}
        pool = pool_of(p.url, {**log, "cache_config_info": {"ignored": True}})
    assert pool["disagree"] and pool["chosen"] == "log" and pool["tokens"] == 1_179_770
    assert (
        "20,377 * 4 = 81,508" in pool["message"]
        and "labkit reports 1,179,770 tokens (log)" in pool["message"]
    )
    assert "ignored" not in pool["sources"]["cache_config_info"]  # only the log's entries are taken over
    assert "log" not in pool.get("absent", {})


def test_an_sglang_endpoint_by_url_reports_server_info_and_its_gauge():
    with SimProc(["--preset", "test", "--flavor", "sglang"]) as p:
        pool = pool_of(p.url)
    assert pool["tokens"] == 100_000 and pool["chosen"] == "server_info.max_total_num_tokens"
    assert not pool["disagree"] and pool["figures"]["sglang:max_total_num_tokens"] == 100_000
    assert pool["absent"] == {"log": NO_LOG}


def test_an_endpoint_that_answers_nothing_gives_no_figure_and_the_reasons():
    pool = pool_of(f"http://127.0.0.1:{free_port(18451, 18459)}")
    assert pool["tokens"] is None and not pool["disagree"] and pool["sources"] == {}
    assert set(pool["absent"]) == {"metrics", "server_info", "log"}
    assert pool["absent"]["metrics"].startswith("/metrics: http://127.0.0.1:")
