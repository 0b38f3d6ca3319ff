"""How many tokens the server sees for a prompt (template included): the basis for exact-length prompts.

Strategies, first that works wins:
1. vLLM-style `POST /tokenize` with the chat messages (or the completions prompt): the server's own count,
   template included;
2. llama-cpp-python `POST /extras/tokenize/count` (raw text only) plus the template overhead learned from one
   non-streamed request's `usage.prompt_tokens`;
3. a straight line fitted to `usage.prompt_tokens` of two non-streamed calibration requests.
Every prefill sample is checked against its own server-reported count afterwards when the engine reports one.
"""

from __future__ import annotations

from typing import Any

from labkit.measure.prompt import prompts as pr
from labkit.measure.request.client import EndpointError, StreamClient
from labkit.recipe import Api


async def usage_prompt_tokens(client: StreamClient, prompt: str, model: str, api: Api) -> int:
    """usage.prompt_tokens of a non-streamed 1-token request (every engine reports usage when not streaming)."""
    body: dict[str, Any] = {"model": model, "max_tokens": 1, "stream": False, "temperature": 0.0}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt
        path = "/v1/completions"
    status, data = await client.post_json(path, body, timeout=client.timeout)
    try:
        return int(data["usage"]["prompt_tokens"])
    except (TypeError, KeyError, ValueError):
        raise EndpointError(client.root + path, f"HTTP {status}: no usage.prompt_tokens in {str(data)[:200]}")


async def make_counter(client: StreamClient, model: str, api: Api) -> tuple[pr.Counter, str]:
    """(async count(prompt) -> server tokens, description of the method)."""

    async def tokenize(prompt: str) -> int:
        body: dict[str, Any] = {"model": model}
        if api == "chat":
            body.update(messages=[{"role": "user", "content": prompt}], add_generation_prompt=True)
        else:
            body["prompt"] = prompt
        status, data = await client.post_json("/tokenize", body)
        if status != 200 or not isinstance(data, dict) or "count" not in data:
            raise EndpointError(client.root + "/tokenize", f"HTTP {status}")
        return int(data["count"])

    async def raw_count(text: str) -> int:
        status, data = await client.post_json("/extras/tokenize/count", {"input": text})
        if status != 200 or not isinstance(data, dict) or "count" not in data:
            raise EndpointError(client.root + "/extras/tokenize/count", f"HTTP {status}")
        return int(data["count"])

    try:
        await tokenize("probe")
        return tokenize, "server /tokenize"
    except EndpointError:
        pass
    try:
        probe = pr.prefill_prompt(pr.nonce(), 50)
        overhead = await usage_prompt_tokens(client, probe, model, api) - await raw_count(probe)

        async def counted(prompt: str) -> int:
            return await raw_count(prompt) + overhead

        return (
            counted,
            f"server /extras/tokenize/count + {overhead} template tokens (from usage.prompt_tokens)",
        )
    except EndpointError:
        pass
    points = []
    for words in (300, 3000):
        prompt = pr.prefill_prompt(pr.nonce(), words)
        points.append((prompt, await usage_prompt_tokens(client, prompt, model, api)))
    return pr.LinearCounter(points), "usage.prompt_tokens of 2 non-streamed calibration requests (linear fit)"
