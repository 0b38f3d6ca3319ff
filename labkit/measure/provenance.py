"""Where a measurement came from: labkit and its git state, the engine's version, the client's HTTP stack,
the host, the plan and the method strings; stored in run.json beside the figures.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import platform
import socket
import subprocess
from collections.abc import Sequence
from typing import Any

from labkit import __version__
from labkit.measure.records import RequestRecord
from labkit.measure.request.client import EndpointError, StreamClient
from labkit.measure.request.timing import NS
from labkit.measure.summary.speed import AGG_WINDOW, DECODE_WINDOW, PREFILL_WINDOW
from labkit.measure.telemetry import io_probe as iop
from labkit.recipe import Api, MeasurePlan, plan_record, repo_root

TIMER = (
    "time.perf_counter_ns; t_send before the SDK call, chunk stamps at each network read before SSE/JSON "
    "parsing (events in one read share a stamp)"
)


async def engine_version(client: StreamClient) -> tuple[str | None, dict[str, Any]]:
    """(the engine's version string, its scalar info fields) from vLLM /version or SGLang /server_info."""
    for path in ("/version", "/server_info"):
        try:
            status, text = await client.get(path)
        except EndpointError:
            continue
        if status == 200:
            try:
                data = json.loads(text)
            except ValueError:
                return text.strip()[:100], {}
            if isinstance(data, dict) and data.get("version") is not None:
                info = {k: v for k, v in data.items() if isinstance(v, str | int | float | bool)}
                return str(data["version"]), info
    return None, {}


def provenance(
    client: StreamClient,
    plan: MeasurePlan,
    records: Sequence[RequestRecord],
    *,
    version: str | None,
    engine_info: dict[str, Any],
    model: str | None,
    models: list[str],
    lane: str,
    recipe_hash: str | None,
    variant: str | None,
    run_id: str,
    api: Api,
    counter_kind: str,
    t_origin: int,
    rtt_ns: int,
    cold_expected: bool,
    io_hooks: Sequence[iop.IOProbe],
) -> dict[str, Any]:
    """The provenance dict of one run (keys in run.json's order); call inside the run's event loop."""
    import openai

    sha, dirty = git_state()
    return {
        "labkit_version": __version__,
        "git_sha": sha,
        "git_dirty": dirty,
        "endpoint": client.base,
        "engine_version": version,
        "engine_info": engine_info,
        "simulated": bool(engine_info.get("simulated", False)),
        "http_backend": client.backend,
        "transport": client.transport,
        "model": model,
        "models_served": models,
        "lane": lane,
        "recipe_hash": recipe_hash,
        "variant": variant,
        "run_id": run_id,
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "api": api,
        "token_sources": sorted({r.output_tokens_source for r in records if r.output_tokens_source}),
        "prompt_length_counter": counter_kind,
        "timer": TIMER,
        "t_origin_ns": t_origin,
        "rtt_s": rtt_ns / NS,
        "windows": {
            "decode": DECODE_WINDOW,
            "agg": AGG_WINDOW,
            "prefill": PREFILL_WINDOW,
            "acceptance": "counter deltas between /metrics scrapes around the decode phase",
            "server": "engine /metrics deltas between the scrapes around each c1 turn, cK group and prefill "
            "sample (the records' server_window)",
        },
        "plan": plan_record(plan),
        "cold_expected": cold_expected,
        "python": platform.python_version(),
        "openai_sdk": openai.__version__,
        "event_loop": type(asyncio.get_running_loop()).__module__,
        "io_probes": [p.name for p in io_hooks],
    }


def git_state() -> tuple[str | None, bool | None]:
    """(HEAD sha, tree dirty) of the labkit checkout; (None, None) outside a git checkout."""
    root = repo_root()
    try:
        sha = (
            subprocess.run(
                ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
        dirty = bool(
            subprocess.run(
                ["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    return sha, dirty if sha else None
