"""The KV pool of a real vLLM (the CPU build, tiny-vllm lane; issue 16, item 3): its boot line and its /metrics
`vllm:cache_config_info` labels land in the boot facts as sources that agree, and the same endpoint read by
URL (labkit.measure.server.kvpool, no boot log) reports the label's figure. The boot is the session's shared lane
(tests/support/vllm_fixtures.py; vLLM CPU takes 40-65 s to boot here): the pool is a fact of its boot, and the
by-URL read sends only GETs."""

from __future__ import annotations

import asyncio

import pytest

from labkit.measure.request.client import StreamClient
from labkit.measure.server.kvpool import read_kv_pool
from tests.support.vllm import vllm_available

pytestmark = pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")


async def by_url(url: str) -> dict:
    async with StreamClient(url, timeout=60) as client:
        return await read_kv_pool(client)


def test_a_real_vllm_boot_keeps_its_log_line_and_cache_config_info_in_agreement(vllm_shared):
    ep = vllm_shared.endpoint
    pool, memory = ep.boot.kv_pool, ep.boot.memory_at_boot
    bare = asyncio.run(by_url(ep.base_url))
    # 1 GiB of KV (VLLM_CPU_KVCACHE_SPACE=1) for the tiny model: 4,096 blocks of 128 tokens
    assert (pool["tokens"], pool["chosen"], pool["disagree"]) == (524_288, "log", False)
    assert "CPU KV cache size: 524,288 tokens" in pool["sources"]["log"]["raw"]
    cc = pool["sources"]["cache_config_info"]
    assert (cc["num_gpu_blocks"], cc["block_size"], cc["kv_cache_size_tokens"]) == (4096, 128, 524_288)
    assert cc["labels"]["kv_cache_memory_bytes"] == "1073741824"
    # VLLM_SERVER_DEV_MODE (the shared lane's, for /reset_prefix_cache): /server_info answers, with vLLM's config
    # but no token figure; without it the route is absent (HTTP 404). Either way absent, never 0.
    assert pool["absent"] == {"server_info": "/server_info has no max_total_num_tokens"}
    assert bare["tokens"] == 524_288 and bare["chosen"] == "cache_config_info.kv_cache_size_tokens"
    assert bare["sources"]["cache_config_info"] == cc and not bare["disagree"]
    assert set(memory) == {"localhost"} and "absent" not in memory["localhost"]
