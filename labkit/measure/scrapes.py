"""The runner's counter-derived numbers: /metrics scraped before and after a window, turned into its deltas.

Speculative acceptance of the decode window (counter deltas, or SGLang's /server_info after a cache flush when
it exports no spec counters), pooled over repeated runs; prefix-cache hits of each prefill sample; whether the
engine served requests before the run (then the first one is not cold). The formulas are in metrics.py.
"""

from __future__ import annotations

import json

from labkit.measure import metrics as mx
from labkit.measure.client import EndpointError, StreamClient
from labkit.measure.recording import CACHE_HIT_TOLERANCE
from labkit.measure.records import RequestRecord

# requests an engine finished since boot: any > 0 means the first request of this run is not a cold one
SERVED_COUNTERS = (
    "vllm:request_success_total",
    "vllm:request_success",
    "sglang:e2e_request_latency_seconds_count",
)


def served_before(before: mx.Samples) -> float | None:
    """Requests the engine finished before this scrape (None when it exports no such counter)."""
    return mx.total(before, *SERVED_COUNTERS)


async def flush_for_acceptance(client: StreamClient, before: mx.Samples | None, notes: list[str]) -> bool:
    """SGLang without spec counters: reset the cumulative acceptance (POST /flush_cache, idle) so
    /server_info reads this window only. True when the reset succeeded."""
    if before is not None and (
        mx.total(before, *mx.V_DRAFTS) is not None or mx.total(before, *mx.S_VERIFY) is not None
    ):
        return False
    try:
        status, text = await client.get("/server_info")
        info = json.loads(text) if status == 200 else {}
    except (EndpointError, ValueError):
        return False
    if not isinstance(info, dict) or not info.get("speculative_algorithm"):
        return False
    status, _ = await client.post_json("/flush_cache", {})
    if status != 200:
        notes.append(f"POST /flush_cache answered HTTP {status}: no per-run acceptance from /server_info")
        return False
    return True


async def window_acceptance(
    client: StreamClient,
    before: mx.Samples | None,
    after: mx.Samples | None,
    *,
    spec_k: int | None,
    spec_k_source: str = "",
    n_window: int,
    flushed: bool,
    notes: list[str],
    stream: tuple[int, int] = (0, 0),
) -> mx.Acceptance | None:
    """Acceptance of the decode window: counter deltas between the scrapes, else (after a successful flush)
    /server_info's. `n_window`: requests answered inside the window (SGLang's deltas include their
    prefill). `stream`: (tokens, token-bearing chunks) of the window's streams with per-chunk counts, τ as
    the client saw it, and τ itself when the engine exports no per-step counts."""
    acc = None
    if before is not None and after is not None:
        try:
            sglang = mx.total(after, *mx.S_VERIFY) is not None
            acc = mx.spec_acceptance(
                before, after, spec_k, n_requests=n_window if sglang else None, k_source=spec_k_source
            )
        except mx.CounterReset as e:
            notes.append(f"acceptance invalid: {e}")
    if acc is None and flushed:
        try:
            status, text = await client.get("/server_info")
            acc = mx.server_info_acceptance(json.loads(text)) if status == 200 else None
        except (EndpointError, ValueError):
            acc = None
    if acc is not None and stream[1]:
        acc.stream_tokens, acc.stream_chunks = float(stream[0]), float(stream[1])
        if acc.steps is None:
            acc.tokens, acc.steps = acc.stream_tokens, acc.stream_chunks
            acc.tau_method = mx.STREAM_TAU + " (the engine exports no per-step counts)"
    return acc


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def pool_acceptance(pooled: mx.Acceptance | None, acc: mx.Acceptance) -> mx.Acceptance:
    """Several runs: pool the counter deltas (never average per-run ratios). Updates `pooled` in place."""
    if pooled is None:
        return acc
    a = pooled
    a.accepted += acc.accepted
    a.per_pos = [
        (p * a.drafts + q * acc.drafts) / (a.drafts + acc.drafts)
        for p, q in zip(a.per_pos, acc.per_pos, strict=False)
    ]
    a.drafts += acc.drafts
    a.draft_tokens = (a.draft_tokens or 0) + (acc.draft_tokens or 0) or None
    for name in ("tokens", "steps", "decode_steps", "stream_tokens", "stream_chunks"):
        setattr(a, name, _add(getattr(a, name), getattr(acc, name)))
    if acc.tau_method != a.tau_method:
        a.tokens = a.steps = None  # runs counted τ differently: no pooled figure
    return a


def server_view(
    recs: list[RequestRecord], before: mx.Samples | None, after: mx.Samples | None
) -> dict[str, float] | None:
    """The engine's own counters over one window of requests (a c1 turn, a cK group, a prefill sample), kept
    on each of its records: `server_window`, and `server_ttft_s` (the window's mean when it held several
    requests). None when a scrape is missing, the engine has no such counters, or it restarted."""
    if before is None or after is None:
        return None
    try:
        view = mx.server_window(before, after)
    except mx.CounterReset:
        return None
    if view is None:
        return None
    for rec in recs:
        rec.server_window = dict(view)
        rec.server_ttft_s = view.get("ttft_s")
    return view


def prefix_cache_sample(
    rec: RequestRecord, before: mx.Samples | None, after: mx.Samples | None
) -> tuple[float, float] | None:
    """(hits, queries) prefix-cache deltas around one prefill sample; flags `rec` on a hit or a counter
    reset."""
    if before is None or after is None:
        return None
    try:
        pc = mx.prefix_cache(before, after)
    except mx.CounterReset as e:
        rec.flags = "; ".join(filter(None, [rec.flags, str(e)]))
        return None
    if pc is not None:
        hits, _ = pc
        if hits > CACHE_HIT_TOLERANCE and "prefix-cache-hit" not in rec.flags:
            rec.flags = "; ".join(filter(None, [rec.flags, f"prefix-cache-hit ({hits:g} hit tokens)"]))
    return pc
