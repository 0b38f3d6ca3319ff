"""What the simulated engine counts and records: the /metrics counters and histograms (rendered by
metrics.py in each flavour's names) and each generation request's ground truth (GET /sim/requests).

Pure data: engine.py fills them in as it schedules; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)


@dataclass
class Histogram:
    """Prometheus-style cumulative histogram (sum, count, per-bucket counts)."""

    sum: float = 0.0
    count: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * len(BUCKETS))

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        for i, edge in enumerate(BUCKETS):
            if value <= edge:
                self.buckets[i] += 1


@dataclass
class Counters:
    """Monotonic since boot (except where noted); rendered by metrics.py in each flavour's names."""

    prompt_tokens: int = 0  # vLLM: at prefill end; SGLang renders finished_* at request finish
    generation_tokens: int = 0  # live, per step
    prefix_queries: int = 0  # tokens, at admission
    prefix_hits: int = 0  # tokens, at admission
    spec_drafts: int = 0
    spec_draft_tokens: int = 0
    spec_accepted: int = 0
    spec_accepted_per_pos: list[int] = field(default_factory=list)
    # at request finish (SGLang semantics)
    finished_prompt_tokens: int = 0
    finished_generation_tokens: int = 0
    finished_cached_tokens: int = 0
    finished_verify_calls: int = 0
    success: dict[str, int] = field(default_factory=dict)  # finish_reason -> count
    preemptions: int = (
        0  # step mode: running requests sent back to the waiting queue (vLLM's num_preemptions)
    )
    # SGLang cumulative acceptance, reset by /flush_cache
    accept_tokens_since_flush: int = 0
    forward_ct_since_flush: int = 0
    # gauges: last finished request's spec acceptance
    last_accept_length: float = 0.0
    last_accept_rate: float = 0.0
    ttft: Histogram = field(default_factory=Histogram)
    queue_time: Histogram = field(
        default_factory=Histogram
    )  # arrival to the prefill's start (vLLM's queue time)
    prefill_time: Histogram = field(default_factory=Histogram)
    decode_time: Histogram = field(default_factory=Histogram)
    e2e: Histogram = field(default_factory=Histogram)


@dataclass
class RequestTruth:
    """What the server actually scheduled and sent for one generation request (served at GET /sim/requests)."""

    id: str
    index: int  # generation request number since boot, from 1
    endpoint: str  # "chat" | "completions"
    stream: bool
    cold: bool
    content: str  # the prompt content category its header names; "" for the default (speculation.py)
    prompt_tokens: int
    cached_tokens: int
    max_tokens: int
    target_tokens: int  # tokens it will produce: min(max_tokens, EOS position)
    eos_at: int | None  # position of the seeded EOS token (None: ignore_eos or no EOS)
    t_arrival: float
    t_prefill_start: float
    t_prefill_end: float  # scheduled first-token time
    rate_factor: float = 1.0  # its decode rate is decode_tps x this (SimConfig.decode_noise, idle_factor)
    idle: bool = False  # admitted after idle_after_s of idle engine: prefill and decode idle_factor slower
    completion_tokens: int = 0
    steps: int = 0  # decode steps after the prefill token (SGLang verify calls)
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    chunks: int = 0  # token-carrying chunks sent (stream) / decode events (non-stream)
    t_first: float | None = None  # actual emission time of the first token
    t_last: float | None = None  # actual emission time of the last token
    t_first_target: float | None = None
    t_last_target: float | None = None
    max_lateness: float = 0.0  # worst (actual - target) over emissions, seconds
    emissions: list[tuple[float, float, int]] | None = None  # (target, actual, tokens) with record_chunks
    finish_reason: str | None = None
    status: str = "running"  # running | finished | aborted | stalled | exited | error
    # step mode (scheduler.py): start of the first step that ran it (t_prefill_start then; queue time is this
    # less t_arrival), the steps its prefill spanned (recomputes included), and how often it was preempted
    t_scheduled: float | None = None
    prefill_chunks: int = 0
    preemptions: int = 0

    def written(self, chunk: int, first: bool, target: float, now: float) -> None:
        """Step mode: the handler wrote this request's `chunk`-th emission at `now`. The emission times are the
        writes, as in the per-request schedule, which stamps just before it writes; the engine loop's stamp is a
        queue hop earlier, which a busy event loop can stretch to milliseconds."""
        if first:
            self.t_first = now
        self.t_last = now
        self.max_lateness = max(self.max_lateness, now - target)
        if self.emissions is not None and chunk < len(self.emissions):
            t, _, n = self.emissions[chunk]
            self.emissions[chunk] = (t, now, n)

    def to_dict(self) -> dict:
        d = asdict(self)
        n = self.completion_tokens
        d["true_decode_tps"] = (
            (n - 1) / (self.t_last - self.t_first)
            if n > 1 and self.t_first is not None and self.t_last and self.t_last > self.t_first
            else None
        )
        dt = self.t_prefill_end - self.t_prefill_start
        d["true_prefill_tps"] = (self.prompt_tokens - self.cached_tokens) / dt if dt > 0 else None
        d["scheduled_decode_tps"] = (  # (N-1) over the scheduled span: the rate meant, free of write jitter
            (n - 1) / (self.t_last_target - self.t_first_target)
            if n > 1 and self.t_last_target and self.t_first_target is not None
            else None
        )
        return d
