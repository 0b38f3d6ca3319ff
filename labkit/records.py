"""What a measurement produces: one RequestRecord per request, a RunSummary of named measures, provenance.

These are the shapes the results store writes (requests.csv, run.json) and the reports read back.
Times are integers in nanoseconds from `time.perf_counter_ns()`, relative to the run's start stamp.

Measure keys (RunSummary.measures) are fixed names, so reports never parse labels:
    decode_c1            median per-request decode t/s over warm c1 turns
    decode_c1_cold       decode t/s of the first request after boot (the cold turn)
    decode_c2_agg        aggregate decode t/s of two concurrent streams, steady-state window
    decode_c<K>_agg      same for other concurrencies
    prefill_<P>          median prefill t/s at a target prompt length P (tokens), unique prompts
    accept_per_draft     mean accepted draft tokens per drafting step (a-bar, bonus token excluded)
    accept_k             K, draft tokens proposed per step
    accept_length        1 + accepted/drafts (tau, bonus token included)
    kv_pool_tokens       KV cache capacity in tokens at boot
    kv_pool_context      the context length the KV capacity refers to
    nfs_read_bytes       shared-NFS bytes read during the run (sum over nodes)
    nfs_read_bytes_per_completion   the same per completed request
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

SCHEMA_VERSION = 1


@dataclass
class RequestRecord:
    """One request as measured. `ok=False` rows are kept for the record but excluded from summaries."""

    run_id: str = ""
    lane: str = ""
    phase: str = ""  # "warmup" | "decode" | "prefill"
    concurrency: int = 1
    turn: int = 0  # index within its phase
    stream: int = 0  # stream index within a concurrent group
    cold: bool = False  # first request after engine boot
    api: str = "chat"
    requested_tokens: int = 0
    prompt_target: int = 0  # requested prompt length in server tokens (prefill)
    prompt_tokens: int | None = None
    prompt_tokens_source: str = ""  # "usage" | "tokenize" | ...
    cached_tokens: int | None = None
    output_tokens: int | None = None
    output_tokens_source: str = ""  # "continuous_usage" | "final_usage" | "chunk count"
    n_first: int | None = None  # tokens in the first token-bearing chunk
    chunks: int = 0  # token-bearing chunks
    t_send: int = 0
    t_first: int | None = None
    t_last: int | None = None
    t_end: int | None = None
    ttft_s: float | None = None
    decode_tps: float | None = None
    prefill_tps: float | None = None
    finish_reason: str | None = None
    http_status: int | None = None
    ok: bool = True
    error: str = ""
    flags: str = ""  # e.g. "prefix-cache-hit" — a sample that is suspect but not failed

    @classmethod
    def columns(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def to_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class RunSummary:
    """Named measures of one run (see module docstring) and how they were obtained."""

    measures: dict[str, float | None] = field(default_factory=dict)
    n_ok: int = 0
    n_failed: int = 0
    method: dict[str, str] = field(default_factory=dict)  # measure -> how (token source, timer, window)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
