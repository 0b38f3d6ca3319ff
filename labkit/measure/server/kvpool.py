"""The engine's KV pool read from its API, for a measurement that has no boot log (`labkit bench URL`) and for
anyone holding a StreamClient: GET /metrics (vLLM's `vllm:cache_config_info` labels, SGLang's
`sglang:max_total_num_tokens` gauge) and GET /server_info (SGLang's `max_total_num_tokens`), each source kept
raw and compared; a boot log's sources (BootFacts.kv_pool["sources"]) join when the caller has them.

The parsing and the comparison are labkit.serve's, which the lane's boot uses too, so both report the pool the
same way (docs/engines.md, "KV pool sources").
"""

from __future__ import annotations

from typing import Any

from labkit.measure.request.client import EndpointError, StreamClient
from labkit.serve import Fetched, api_sources, kv_pool

GET_TIMEOUT = 10.0  # seconds for one GET of /metrics or /server_info
NO_LOG = "no boot log (an endpoint measured by URL)"


async def fetch(client: StreamClient, path: str, timeout: float = GET_TIMEOUT) -> Fetched:
    """(status, body) of GET root+path, or (None, why) when nothing answered."""
    try:
        return await client.get(path, timeout=timeout)
    except EndpointError as e:
        return None, str(e)


async def read_kv_pool(client: StreamClient, log: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The KV pool from the endpoint's API, compared with `log` ({source: facts} of a boot log, e.g. the "log"
    and "log_allocated" entries of a lane's BootFacts.kv_pool["sources"]); the same shape as BootFacts.kv_pool.
    Call it outside a measurement window: it sends two GETs."""
    sources, absent = api_sources(await fetch(client, "/metrics"), await fetch(client, "/server_info"))
    logged = {k: v for k, v in (log or {}).items() if k.startswith("log")}
    if not logged:
        absent["log"] = NO_LOG
    return kv_pool({**logged, **sources}, absent)
