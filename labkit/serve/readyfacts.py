"""What the lane's start reads once the engine is ready (docs/engines.md, "Memory at boot" and its
"KV pool sources"):

- memory on every node: MemAvailable, Cached and MemTotal from /proc/meminfo before the start (the pre-boot
  check's reading, or the one after the page-cache drop when the start dropped it) and after ready (one
  `cat /proc/meminfo` per node, all nodes at once), with what the engine took;
- the KV pool from every source: the head's boot-log lines and its API (GET /metrics, GET /server_info),
  compared by labkit.serve.kvsources.

What could not be read is absent with the reason, never 0; nothing here fails a start that reached ready.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from labkit.nodes import Host, HostError
from labkit.serve.checks import Preflight
from labkit.serve.engines import BootFacts
from labkit.serve.kvsources import Fetched, api_sources, kv_pool
from labkit.serve.preflight import MEMINFO_COMMAND, parse_meminfo
from labkit.serve.state import LaneState
from labkit.units import format_size

MEMINFO_TIMEOUT = 30.0  # seconds for one node's /proc/meminfo after ready
HTTP_TIMEOUT = 10.0  # seconds for one GET of /metrics or /server_info
AFTER_DROP = "after the page-cache drop"
PREBOOT = "pre-boot check"

# {node: ({meminfo bytes}, where it was read)} or {node: why it was not}
Before = dict[str, tuple[dict[str, int], str] | str]


def before_start(preflight: Preflight | None) -> Before:
    """Each node's memory just before the start, from the pre-boot checks (labkit.serve.checks.Preflight): the
    reading after the page-cache drop where the start dropped it, else the memory check's."""
    if preflight is None:
        return {}
    drops = preflight.facts("page cache")
    out: Before = {}
    for c in preflight.checks:
        if c.check != "memory":
            continue
        dropped = drops.get(c.node, {})
        if dropped.get("dropped") and "MemAvailable" in dropped.get("after", {}):
            out[c.node] = (dict(dropped["after"]), AFTER_DROP)
        elif "MemAvailable" in c.facts:
            out[c.node] = (dict(c.facts), PREBOOT)
        else:
            out[c.node] = c.result
    return out


def read_meminfo(host: Host) -> dict[str, int] | str:
    """One node's /proc/meminfo in bytes, or why it could not be read."""
    try:
        r = host.run(MEMINFO_COMMAND, timeout=MEMINFO_TIMEOUT)
    except HostError as e:
        return e.message
    if not r.ok:
        return r.stderr.strip() or f"{MEMINFO_COMMAND} failed (exit {r.exit_code})"
    info = parse_meminfo(r.stdout)
    return info if "MemAvailable" in info else "no MemAvailable in /proc/meminfo"


def read_after_ready(lane: LaneState) -> dict[str, dict[str, int] | str]:
    """Every node's /proc/meminfo at once (one command each); a node that cannot answer gets its reason."""
    out: dict[str, dict[str, int] | str] = {}
    for node, (value, err) in lane.group.begin(read_meminfo).outcomes().items():
        out[node] = value if value is not None else f"{type(err).__name__}: {err}"
    return out


def memory_facts(before: Before, after: dict[str, dict[str, int] | str], nodes: list[str]) -> dict[str, dict]:
    """{node: {before, before_source, after_ready, engine_took, page_cache_grew, absent}} in bytes.

    `engine_took` is MemAvailable before minus after ready (on unified memory it holds the GPU's allocations
    too), `page_cache_grew` Cached after minus before; a figure that cannot be formed is under `absent`."""
    out: dict[str, dict] = {}
    for node in nodes:
        entry: dict[str, Any] = {}
        absent: dict[str, str] = {}
        b = before.get(node, "no pre-boot reading")
        if isinstance(b, tuple):
            entry["before"], entry["before_source"] = b
        else:
            absent["before"] = b
        a = after.get(node, "not read")
        if isinstance(a, dict):
            entry["after_ready"] = a
        else:
            absent["after_ready"] = a
        for key, name, sign in (("MemAvailable", "engine_took", 1), ("Cached", "page_cache_grew", -1)):
            if key in entry.get("before", {}) and key in entry.get("after_ready", {}):
                entry[name] = sign * (entry["before"][key] - entry["after_ready"][key])
            else:
                absent[name] = f"needs {key} before the start and after ready"
        if absent:
            entry["absent"] = absent
        out[node] = entry
    return out


def http_text(url: str, timeout: float = HTTP_TIMEOUT) -> Fetched:
    """(status, body) of a GET, or (None, why) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, ""
    except (urllib.error.URLError, OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {getattr(e, 'reason', e)}"


def kv_pool_at_boot(lane: LaneState, facts: BootFacts) -> dict[str, Any]:
    """The KV pool from the head's boot log and from its API, compared (labkit.serve.kvsources.kv_pool)."""
    sources, absent = api_sources(
        http_text(lane.root_url + "/metrics"), http_text(lane.root_url + "/server_info")
    )
    log = lane.engine.kv_sources(facts)
    if not log:
        absent["log"] = "no KV pool line in the head's boot log"
    return kv_pool({**log, **sources}, absent)


def after_ready(lane: LaneState, preflight: Preflight | None, facts: BootFacts) -> None:
    """Memory on every node (before: from `preflight`) and the KV pool, into `facts` (memory_at_boot,
    kv_pool), each said once."""
    facts.memory_at_boot = memory_facts(before_start(preflight), read_after_ready(lane), lane.group.names)
    facts.kv_pool = kv_pool_at_boot(lane, facts)
    for node, m in facts.memory_at_boot.items():
        lane.say(f"  memory {node}: {memory_line(m)}")
    pool = facts.kv_pool
    lane.say(("  warning: " if pool["disagree"] else "  KV pool: ") + pool["message"])


def memory_line(m: dict[str, Any]) -> str:
    """One node's memory at boot as a progress line."""
    if "after_ready" not in m:
        return f"memory after ready not read: {m['absent']['after_ready']}"
    text = f"MemAvailable {format_size(m['after_ready']['MemAvailable'])} after ready"
    if "engine_took" in m:
        text += f" ({format_size(abs(m['engine_took']))} {'less' if m['engine_took'] >= 0 else 'more'} than before)"
    if "Cached" in m["after_ready"]:
        text += f", page cache {format_size(m['after_ready']['Cached'])}"
    return text
