"""The engine's KV pool from every source it offers, each kept in its raw form, and compared
(docs/engines.md, "KV pool sources").

Sources: the head's boot-log lines (`Engine.kv_sources`), vLLM's `vllm:cache_config_info` labels and SGLang's
`sglang:max_total_num_tokens` gauge from GET /metrics, and SGLang's GET /server_info. Pure: the lane's boot
(labkit.serve.readyfacts) and `labkit bench URL` (labkit.measure.server.kvpool) fetch the bodies and hand them here,
so a lane and a bare endpoint report the pool the same way.
"""

from __future__ import annotations

import json
from typing import Any

from labkit.serve.prometheus import Samples, parse_prometheus

# (HTTP status, body) of one GET, or (None, why nothing answered)
Fetched = tuple[int | None, str]

CACHE_INFO = "vllm:cache_config_info"
SGLANG_GAUGE = "sglang:max_total_num_tokens"
BLOCKS = "cache_config_info.num_gpu_blocks*block_size"
BLOCKS_TOLERANCE = 0.01  # relative; the other figures are token counts that must be equal
# what `kv_pool` holds as "tolerance": vLLM states tokens as max concurrency * max_model_len, a little under
# blocks * block_size when max_model_len is not a whole number of blocks; the token counts are one integer
TOLERANCE = "equal token counts; num_gpu_blocks*block_size within 1 %"

# The figures in the order labkit reports them (the first present wins): (figure, source, field).
FIGURES = (
    ("log", "log", "tokens"),
    ("cache_config_info.kv_cache_size_tokens", "cache_config_info", "kv_cache_size_tokens"),
    ("server_info.max_total_num_tokens", "server_info", "max_total_num_tokens"),
    (SGLANG_GAUGE, "metrics_gauge", "tokens"),
    ("log_allocated", "log_allocated", "tokens"),
    ("server_info.token_capacity", "server_info", "token_capacity"),
    (BLOCKS, "cache_config_info", "blocks_x_block_size"),  # a token count only for one-block-size layouts
)
HYBRID_HINT = (
    "num_gpu_blocks * block_size counts tokens only when every layer uses one block size; a hybrid KV "
    "layout (DeepSeek-V4: sliding window, compressor state) reports its smallest group's block size"
)


def count(value: Any) -> int | None:
    """A non-negative whole number as an engine exports it (a label string, a JSON number), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def cache_config_source(samples: Samples) -> dict[str, Any] | None:
    """vLLM's `vllm:cache_config_info` (value 1, every CacheConfig field a label): num_gpu_blocks, block_size,
    kv_cache_size_tokens where the build exports it ("None" is absent), their product, and every label as
    exported. Engine "0"'s series when there are several (one per DP engine, each with its own pool)."""
    series = samples.get(CACHE_INFO) or []
    if not series:
        return None
    labels = next((lab for lab, _ in series if lab.get("engine") == "0"), series[0][0])
    out: dict[str, Any] = {}
    for key in ("num_gpu_blocks", "block_size", "kv_cache_size_tokens"):
        value = count(labels.get(key))
        if value is not None:
            out[key] = value
    if "num_gpu_blocks" in out and "block_size" in out:
        out["blocks_x_block_size"] = out["num_gpu_blocks"] * out["block_size"]
    if len(series) > 1:
        out["series"] = len(series)
    out["labels"] = dict(labels)
    return out


def gauge_source(samples: Samples) -> dict[str, Any] | None:
    """SGLang's `sglang:max_total_num_tokens` gauge (with --enable-metrics): the largest over its series (one
    setting exported per rank), with every series as exported."""
    series = samples.get(SGLANG_GAUGE) or []
    values = [count(v) for _, v in series]
    if not series or any(v is None for v in values):
        return None
    return {
        "tokens": max(v for v in values if v is not None),
        "raw": [{"labels": dict(lab), "value": v} for lab, v in series],
    }


def server_info_source(info: Any) -> dict[str, Any] | None:
    """SGLang's GET /server_info: `max_total_num_tokens` (scheduler info, merged into the top level; nested
    under `scheduler_info` accepted too) and rank 0's `internal_states[].memory_usage.token_capacity`, with
    the fields as served."""
    if not isinstance(info, dict):
        return None
    out: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    where, total = "max_total_num_tokens", info.get("max_total_num_tokens")
    nested = info.get("scheduler_info")
    if total is None and isinstance(nested, dict):
        where, total = "scheduler_info.max_total_num_tokens", nested.get("max_total_num_tokens")
    if count(total) is not None:
        out["max_total_num_tokens"], raw[where] = count(total), total
    states = info.get("internal_states")
    found = [s.get("memory_usage") for s in states if isinstance(s, dict)] if isinstance(states, list) else []
    usage = [u for u in found if isinstance(u, dict)]
    if usage and count(usage[0].get("token_capacity")) is not None:
        out["token_capacity"] = count(usage[0]["token_capacity"])
        raw["internal_states[].memory_usage"] = usage
    if not out:
        return None
    out["raw"] = raw
    return out


def unanswered(fetched: Fetched) -> str:
    status, body = fetched
    return (body or "nothing answered") if status is None else f"HTTP {status}"


def api_sources(metrics: Fetched, server_info: Fetched) -> tuple[dict[str, dict], dict[str, str]]:
    """({source: facts}, {what is missing: why}) from the bodies of GET /metrics and GET /server_info."""
    sources: dict[str, dict] = {}
    absent: dict[str, str] = {}
    if metrics[0] == 200:
        samples = parse_prometheus(metrics[1])
        for name, src in (
            ("cache_config_info", cache_config_source(samples)),
            ("metrics_gauge", gauge_source(samples)),
        ):
            if src is not None:
                sources[name] = src
        if not sources:
            absent["metrics"] = f"/metrics has neither {CACHE_INFO} nor {SGLANG_GAUGE}"
    else:
        absent["metrics"] = f"/metrics: {unanswered(metrics)}"
    if server_info[0] == 200:
        try:
            info = json.loads(server_info[1])
        except ValueError:
            info = None
        src = server_info_source(info)
        if src is not None:
            sources["server_info"] = src
        else:
            absent["server_info"] = "/server_info has no max_total_num_tokens"
    else:
        absent["server_info"] = f"/server_info: {unanswered(server_info)}"
    return sources, absent


def figures(sources: dict[str, dict]) -> dict[str, int]:
    """{figure: tokens} of every token figure the sources hold, in FIGURES order."""
    out = {}
    for fig, src, key in FIGURES:
        value = sources.get(src, {}).get(key)
        if value is not None:
            out[fig] = value
    return out


def agrees(fig: str, value: int, reported: int) -> bool:
    if fig == BLOCKS:
        return abs(value - reported) <= BLOCKS_TOLERANCE * reported
    return value == reported


def kv_pool(sources: dict[str, dict], absent: dict[str, str] | None = None) -> dict[str, Any]:
    """The KV pool as labkit reports it: `tokens` from the first figure present in FIGURES order (`chosen`),
    every figure, every source in its raw form, `disagree` when a figure differs beyond the tolerance, a
    `message` naming the numbers, and what could not be read (`absent`, with why)."""
    figs = figures(sources)
    out: dict[str, Any] = {"tokens": None, "chosen": None, "figures": figs, "sources": sources}
    out.update(disagree=False, tolerance=TOLERANCE)
    if absent:
        out["absent"] = dict(absent)
    if not figs:
        why = "; ".join(f"{k}: {v}" for k, v in (absent or {}).items()) or "no source offered one"
        out["message"] = f"no KV pool figure ({why})"
        return out
    chosen = next((f for f in figs if f != BLOCKS), BLOCKS)
    reported = figs[chosen]
    out.update(tokens=reported, chosen=chosen)
    off = [f for f, v in figs.items() if f != chosen and not agrees(f, v, reported)]
    out["disagree"] = bool(off)
    out["message"] = message(sources, figs, chosen, off)
    return out


def message(sources: dict[str, dict], figs: dict[str, int], chosen: str, off: list[str]) -> str:
    """The sentence the boot shows and the record keeps: the reported number, then what disagrees or agrees."""
    reported = f"{figs[chosen]:,} tokens ({chosen})"

    def shown(fig: str) -> str:
        if fig == BLOCKS:
            c = sources["cache_config_info"]
            return f"{fig} {c['num_gpu_blocks']:,} * {c['block_size']} = {figs[fig]:,}"
        return f"{fig} {figs[fig]:,}"

    if off:
        text = f"KV pool sources disagree: {'; '.join(shown(f) for f in off)} vs {shown(chosen)}; "
        text += f"labkit reports {reported}"
        return text + (f": {HYBRID_HINT}" if BLOCKS in off else "")
    others = [f for f in figs if f != chosen]
    if chosen == BLOCKS:
        return f"{shown(BLOCKS)} tokens, the only figure: {HYBRID_HINT}"
    return f"{reported}" + (f"; {', '.join(others)} agree" if others else ", the only figure")
