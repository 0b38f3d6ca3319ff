"""Prometheus text exposition of the engine counters, in vLLM's or SGLang's metric names.

vLLM: counters carry labels model_name and engine="0", token counters move per step (live), and every
counter also has a `<name>_created` sample as prometheus_client writes it. SGLang: token counters and
spec_verify_calls_total move at request finish; spec gauges describe the last finished request.
Both flavours export the running and waiting gauges (`request_states`) with their values at the scrape; a real
SGLang sets them only when it logs a batch (docs/engines.md, "Metrics labkit reads").
"""

from __future__ import annotations

from labkit.sim.accounts import BUCKETS, Histogram
from labkit.sim.config import SimConfig
from labkit.sim.engine import SimEngine
from labkit.sim.scheduler import StepScheduler


def _labels(base: str, extra: str = "") -> str:
    return "{" + ",".join(x for x in (base, extra) if x) + "}"


class _Out:
    def __init__(self, base_labels: str, created: float | None):
        self.lines: list[str] = []
        self.base = base_labels
        self.created = created

    def counter(self, name: str, help_: str, values: list[tuple[str, float]]) -> None:
        """`name` without the _total suffix; values: (extra labels, value)."""
        self.lines += [f"# HELP {name}_total {help_}", f"# TYPE {name}_total counter"]
        for extra, v in values:
            self.lines.append(f"{name}_total{_labels(self.base, extra)} {_num(v)}")
        if self.created is not None:
            for extra, _ in values:
                self.lines.append(f"{name}_created{_labels(self.base, extra)} {self.created:.6f}")

    def gauge(self, name: str, help_: str, value: float, extra: str = "") -> None:
        self.lines += [
            f"# HELP {name} {help_}",
            f"# TYPE {name} gauge",
            f"{name}{_labels(self.base, extra)} {_num(value)}",
        ]

    def histogram(self, name: str, help_: str, h: Histogram) -> None:
        self.lines += [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
        for edge, n in zip(BUCKETS, h.buckets, strict=True):
            le = f'le="{edge}"'
            self.lines.append(f"{name}_bucket{_labels(self.base, le)} {n}")
        inf = 'le="+Inf"'
        self.lines.append(f"{name}_bucket{_labels(self.base, inf)} {h.count}")
        self.lines.append(f"{name}_count{_labels(self.base)} {h.count}")
        self.lines.append(f"{name}_sum{_labels(self.base)} {h.sum!r}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _num(v: float) -> str:
    if isinstance(v, int) or float(v).is_integer():
        return f"{float(v):.1f}"
    return repr(float(v))


def request_states(
    engine: SimEngine, now: float | None = None, sched: StepScheduler | None = None
) -> tuple[int, int]:
    """(running, waiting) at `now`: waiting = admitted, its prefill not started yet (one prefill at a time);
    running = the other unfinished requests (prefilling or decoding), as a scheduler counts them. In step mode
    the scheduler's own lists (a preempted request waits again)."""
    if sched is not None:
        return len(sched.running), len(sched.waiting)
    now = engine.clock() if now is None else now
    live = [r for r in engine.records if r.status == "running"]
    waiting = sum(1 for r in live if r.t_prefill_start > now)
    return len(live) - waiting, waiting


def render(engine: SimEngine, wall_boot: float, held: int = 0, sched: StepScheduler | None = None) -> str:
    """The /metrics body for the engine's flavour; `held`: requests waiting for a slot (max_num_seqs), which
    the waiting gauge counts; `sched`: the step scheduler in step mode (its gauges and preemptions)."""
    if engine.cfg.flavor == "vllm":
        return render_vllm(engine, wall_boot, held, sched)
    return render_sglang(engine, held, sched)


def _kv_usage(engine: SimEngine, sched: StepScheduler | None) -> float:
    """Step mode: blocks held by running requests over the pool; else the prefix cache's fill."""
    if sched is not None:
        return sched.kv_usage
    return min(1.0, len(engine._cache) / max(1, engine._cache_cap))


def render_vllm(
    engine: SimEngine, wall_boot: float, held: int = 0, sched: StepScheduler | None = None
) -> str:
    cfg, c = engine.cfg, engine.c
    out = _Out(f'engine="0",model_name="{cfg.model_name}"', created=wall_boot)
    running, waiting = request_states(engine, sched=sched)
    waiting += held
    out.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
    out.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
    out.gauge(
        "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", _kv_usage(engine, sched)
    )
    if sched is not None:
        out.counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", [("", c.preemptions)]
        )
    out.counter(
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        [("", c.prefix_queries)],
    )
    out.counter(
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        [("", c.prefix_hits)],
    )
    out.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [("", c.prompt_tokens)])
    out.counter(
        "vllm:generation_tokens", "Number of generation tokens processed.", [("", c.generation_tokens)]
    )
    out.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [(f'finished_reason="{r}"', c.success.get(r, 0)) for r in ("stop", "length", "abort")],
    )
    if cfg.spec_on:
        out.counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [("", c.spec_drafts)])
        out.counter(
            "vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [("", c.spec_draft_tokens)]
        )
        out.counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [("", c.spec_accepted)]
        )
        out.counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [(f'position="{i}"', n) for i, n in enumerate(c.spec_accepted_per_pos)],
        )
    out.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", c.ttft)
    out.histogram(
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        c.queue_time,
    )
    out.histogram(
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        c.prefill_time,
    )
    out.histogram(
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        c.decode_time,
    )
    out.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", c.e2e)
    out.gauge(
        "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", 1, cache_config_labels(cfg)
    )
    return out.text()


def cache_config_labels(cfg: SimConfig) -> str:
    """vLLM's CacheConfig as labels: the pool's blocks, the block size (a hybrid layout's smallest group's, as
    vLLM reports it), kv_cache_size_tokens (the logged figure) unless switched off, as a real build does."""
    blocks = cfg.kv_gpu_blocks or cfg.kv_cache_tokens // cfg.block_size
    labels = [
        f'block_size="{cfg.kv_hybrid_block_size or cfg.block_size}"',
        'cache_dtype="fp8"',
        f'enable_prefix_caching="{cfg.prefix_caching}"',
    ]
    if cfg.kv_tokens_label:
        labels.append(f'kv_cache_size_tokens="{cfg.kv_cache_tokens}"')
    labels += [f'num_gpu_blocks="{blocks}"', 'simulated="true"']
    return ",".join(labels)


def render_sglang(engine: SimEngine, held: int = 0, sched: StepScheduler | None = None) -> str:
    cfg, c = engine.cfg, engine.c
    out = _Out(f'model_name="{cfg.model_name}"', created=None)
    out.counter(
        "sglang:prompt_tokens", "Number of prefill tokens processed.", [("", c.finished_prompt_tokens)]
    )
    out.counter(
        "sglang:generation_tokens",
        "Number of generation tokens processed.",
        [("", c.finished_generation_tokens)],
    )
    out.counter("sglang:cached_tokens", "Number of cached prompt tokens.", [("", c.finished_cached_tokens)])
    out.counter(
        "sglang:realtime_tokens",
        "Tokens processed, updated live.",
        [
            ('mode="prefill_compute"', _compute(engine)),
            ('mode="prefill_cache"', _cache_done(engine)),
            ('mode="decode"', c.generation_tokens),
        ],
    )
    running, waiting = request_states(engine, sched=sched)
    waiting += held
    out.gauge("sglang:num_running_reqs", "The number of running requests.", running)
    out.gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", waiting)
    out.gauge("sglang:token_usage", "The token usage.", _kv_usage(engine, sched))
    out.gauge(
        "sglang:cache_hit_rate",
        "The prefix cache hit rate.",
        c.prefix_hits / c.prefix_queries if c.prefix_queries else 0.0,
    )
    out.gauge(
        "sglang:max_total_num_tokens", "Maximum total number of tokens in the KV pool.", cfg.kv_cache_tokens
    )
    if cfg.spec_on:
        out.counter(
            "sglang:spec_verify_calls", "Number of speculative verify calls.", [("", c.finished_verify_calls)]
        )
        out.gauge(
            "sglang:spec_accept_length",
            "Average accepted tokens per forward (bonus included).",
            c.last_accept_length,
        )
        out.gauge("sglang:spec_accept_rate", "Accepted over proposed draft tokens.", c.last_accept_rate)
        out.gauge("sglang:spec_num_draft_tokens", "Verify width (draft tokens + 1).", cfg.spec_k + 1)
    out.histogram(
        "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", c.ttft
    )
    out.histogram("sglang:e2e_request_latency_seconds", "Histogram of end-to-end request latency.", c.e2e)
    return out.text()


def _compute(engine: SimEngine) -> int:
    """Prompt tokens actually prefilled by requests whose prefill has ended."""
    return sum(r.prompt_tokens - r.cached_tokens for r in engine.records if r.t_first is not None)


def _cache_done(engine: SimEngine) -> int:
    return sum(r.cached_tokens for r in engine.records if r.t_first is not None)
