"""Per-request server truth: the engine's own figures for one request, read from the `metrics` object vLLM puts
in the response (`--enable-per-request-metrics`, `--per-request-spec-decode-metrics`), set beside labkit's.

- `engine_ttft_s`: queue time + vLLM's `time_to_first_token_ms`, i.e. from the request entering the engine
  core's queue to its first token (vLLM's own TTFT field starts at scheduling, not at arrival);
- `engine_decode_tps`: (N − 1) / `generation_time_ms`, the engine's decode rate from its first to its last token;
- `ttft_minus_engine_s` = labkit's `ttft_s` − `engine_ttft_s` (what the network, the API server and the client
  add; ≥ 0 unless the clocks disagree), `decode_vs_engine` = labkit's `decode_tps` / `engine_decode_tps` − 1;
- `engine_accept_per_draft` (ā: accepted draft tokens per verify step) and `engine_accept_length`
  (τ = N / (N − accepted): tokens per engine step of this request, its prefill step included).

docs/measurement.md, "Per-request server truth"; the engine side in docs/engines.md, "Per-request metrics in the
response". Pure: a record and its response's object in, the record's fields set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.measure.records import RequestRecord

MS = 1000.0


def _number(d: dict[str, Any], key: str) -> float | None:
    v = d.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def spec_counts(metrics: dict[str, Any] | None) -> dict[str, float] | None:
    """(accepted, verify steps, draft tokens proposed, K) of one request's `speculative_decoding` object, None
    when the response has none or it is malformed."""
    sd = (metrics or {}).get("speculative_decoding")
    if not isinstance(sd, dict):
        return None
    out = {
        key: _number(sd, name)
        for key, name in (
            ("accepted", "num_accepted_draft_tokens"),
            ("steps", "num_spec_steps"),
            ("draft_tokens", "num_draft_tokens"),
            ("k", "num_spec_tokens"),
        )
    }
    if out["accepted"] is None or out["steps"] is None:
        return None
    return {k: v for k, v in out.items() if v is not None}


def apply_server_truth(rec: RequestRecord, metrics: dict[str, Any] | None) -> None:
    """Store the response's `metrics` object on the record and set the engine's figures and the client-engine
    differences that can be formed from it (each left None when a field it needs is absent)."""
    if not isinstance(metrics, dict):
        return
    rec.engine_metrics = metrics
    queue, first = _number(metrics, "queue_time_ms"), _number(metrics, "time_to_first_token_ms")
    if queue is not None and first is not None:
        rec.engine_ttft_s = (queue + first) / MS
        if rec.ttft_s is not None:
            rec.ttft_minus_engine_s = rec.ttft_s - rec.engine_ttft_s
    gen, n = _number(metrics, "generation_time_ms"), rec.output_tokens
    if gen and n is not None and n > 1:
        rec.engine_decode_tps = (n - 1) / (gen / MS)
        if rec.decode_tps is not None:
            rec.decode_vs_engine = rec.decode_tps / rec.engine_decode_tps - 1.0
    spec = spec_counts(metrics)
    if spec is not None:
        accepted, steps = spec["accepted"], spec["steps"]
        rec.engine_accept_per_draft = accepted / steps if steps else None
        if n is not None and n > accepted:
            rec.engine_accept_length = n / (n - accepted)


def requests_accepted(window: Sequence[RequestRecord]) -> float | None:
    """Σ of the per-request accepted draft tokens of one window's requests, to set beside the window's counter
    delta (they count the same verify steps); None when a request failed or came without its counts, since the
    engine counted drafts labkit cannot attribute then (docs/engines.md, "Per-request metrics in the response")."""
    counts = [spec_counts(r.engine_metrics) if r.ok else None for r in window]
    if not counts or any(c is None for c in counts):
        return None
    return sum(c["accepted"] for c in counts if c is not None)
