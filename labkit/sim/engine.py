"""The simulated engine core: admission, prefix cache, token schedule, spec steps, counters, ground truth.
Which drafts a speculative step accepts is speculation.py's; the counters and truth records are accounts.py's.

Pure bookkeeping with an injected clock and no I/O, so the HTTP layer only waits and writes. Times are
`time.perf_counter()` seconds (CLOCK_MONOTONIC on Linux, comparable across processes on one host).

By default the step scheduler (scheduler.py) decides when each request runs and calls this module's first_token
and step; with max_num_batched_tokens=0 this module's own per-request schedule does.

Per-request schedule of one request (all targets absolute, chained from the previous *target*, never from the actual
wake-up time, so sleep jitter does not accumulate):
- prefill: starts at max(arrival, end of the previous prefill) (one prefill at a time, like one GPU);
  lasts (prompt_tokens - cached_tokens) / prefill_tps. The first token is emitted when it ends.
- decode step k: target_k = target_{k-1} + step_time(b), b = requests currently decoding (read when the
  step is scheduled), step_time(b) = (1 + E[accepted]) / (decode_tps * f) * (1 + batch_beta * (b - 1)), with
  f the request's rate factor (1, or drawn once per request with decode_noise: SimConfig.rate_factor).
  A request admitted after idle_after_s of idle engine has f divided by idle_factor and its prefill lasts
  idle_factor times longer (the idle penalty). A request of P prompt tokens has f divided by
  1 + decode_ctx_slope * P / 1000 (decode slows with context).
  A step due inside another request's prefill waits for it (prefill_chunk_tokens = 0) or is stretched by one
  chunk's time (prefill_chunk_tokens / prefill_tps), as chunked prefill shares the forward pass.
- speculative step: the request's drafter draws how many drafts are accepted (labkit/sim/speculation.py: the
  rates of its prompt's content category, else spec_accept). The step emits 1 + accepted tokens in one
  chunk, truncated at the request's end; the counters count the full step as vLLM does.
"""

from __future__ import annotations

import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable

from labkit.sim.accounts import Counters, RequestTruth
from labkit.sim.config import SimConfig
from labkit.sim.speculation import drafter


class SimEngine:
    """Scheduling and accounting for all requests of one simulated server."""

    def __init__(self, cfg: SimConfig, clock: Callable[[], float] = time.perf_counter):
        self.cfg = cfg
        self.clock = clock
        self.t_boot = clock()
        self.n_requests = 0  # generation requests admitted (numbering for faults and cold turns)
        self.running = 0
        self.decoding = 0
        self.c = Counters(spec_accepted_per_pos=[0] * cfg.spec_k)
        self.records: list[RequestTruth] = []
        self._cache: OrderedDict[int, None] = OrderedDict()
        self._cache_cap = max(1, cfg.kv_cache_tokens // cfg.block_size)
        self._prefill_free_at = 0.0
        self._last_end: float | None = None  # when the last request ended (the idle penalty counts from it)
        self._prefills: list[tuple[float, float, int]] = []  # (start, end, request index)
        self._hashes: dict[int, list[int]] = {}
        self._rng: dict[int, random.Random] = {}
        self.drafter = drafter(cfg)

    # ---- prefix cache ---------------------------------------------------------------------------
    def block_hashes(self, ids: list[int]) -> list[int]:
        """Chained hashes of the full blocks: block i's hash covers every token before its end."""
        bs = self.cfg.block_size
        out, h = [], 0
        for i in range(0, len(ids) - bs + 1, bs):
            h = hash((h, tuple(ids[i : i + bs])))
            out.append(h)
        return out

    def cached_prefix(self, hashes: list[int], prompt_len: int) -> int:
        """Cached tokens for a prompt: leading blocks found in the cache, at most prompt_len - 1 tokens."""
        if not self.cfg.prefix_caching:
            return 0
        limit = (prompt_len - 1) // self.cfg.block_size
        hits = 0
        for h in hashes[:limit]:
            if h not in self._cache:
                break
            self._cache.move_to_end(h)
            hits += 1
        return hits * self.cfg.block_size

    def _insert(self, hashes: list[int]) -> None:
        for h in hashes:
            self._cache[h] = None
            self._cache.move_to_end(h)
        while len(self._cache) > self._cache_cap:
            self._cache.popitem(last=False)

    def restart(self) -> None:
        """Counters from zero and an empty prefix cache, as a restarted engine shows them (the restart fault);
        requests in flight and the ground truth stay."""
        self.c = Counters(spec_accepted_per_pos=[0] * self.cfg.spec_k)
        self._cache.clear()

    def flush_cache(self) -> bool:
        """Drop the prefix cache and zero the since-flush acceptance (SGLang: only when idle)."""
        if self.running:
            return False
        self._cache.clear()
        self.c.accept_tokens_since_flush = 0
        self.c.forward_ct_since_flush = 0
        return True

    # ---- request lifecycle -------------------------------------------------------------------------
    def admit(
        self,
        ids: list[int],
        max_tokens: int,
        min_tokens: int,
        ignore_eos: bool,
        endpoint: str,
        stream: bool,
        req_id: str,
        now: float | None = None,
        content: str = "",
        scheduled: bool = True,
    ) -> RequestTruth:
        """Register a request and fix its natural length and, unless the step scheduler times it
        (`scheduled=False`: its prefill times stay at its arrival until a step runs it), its prefill schedule."""
        cfg = self.cfg
        now = self.clock() if now is None else now
        self.n_requests += 1
        index = self.n_requests
        cold = index <= cfg.cold_requests
        rng = random.Random(cfg.seed * 1_000_003 + index)
        eos_at = None
        if not ignore_eos and cfg.eos_mean_tokens > 0:
            eos_at = self._geometric(rng, cfg.eos_mean_tokens)
            if eos_at < min_tokens:  # EOS blocked until min_tokens: the hazard restarts after them
                eos_at = min_tokens + self._geometric(rng, cfg.eos_mean_tokens)
        target = max_tokens if eos_at is None else min(max_tokens, eos_at)
        hashes = self.block_hashes(ids) if cfg.prefix_caching else []
        cached = self.cached_prefix(hashes, len(ids))
        self.c.prefix_queries += len(ids)
        self.c.prefix_hits += cached
        idle = self._idle(now)
        slow = cfg.idle_factor if idle else 1.0
        start = end = now
        if scheduled:
            self._prefills = [p for p in self._prefills if p[1] > now]
            start = max(now, self._prefill_free_at)
            end = start + (len(ids) - cached) / cfg.prefill_rate(cold) * slow
            self._prefill_free_at = end
            self._prefills.append((start, end, index))
        rec = RequestTruth(
            id=req_id,
            index=index,
            endpoint=endpoint,
            stream=stream,
            cold=cold,
            content=content,
            prompt_tokens=len(ids),
            cached_tokens=cached,
            max_tokens=max_tokens,
            target_tokens=target,
            eos_at=eos_at,
            t_arrival=now,
            t_prefill_start=start,
            t_prefill_end=end,
            rate_factor=cfg.rate_factor(index) / slow / (1.0 + cfg.decode_ctx_slope * len(ids) / 1000.0),
            idle=idle,
            accepted_per_pos=[0] * (cfg.spec_k if cfg.spec_on else 0),
        )
        if cfg.record_chunks:
            rec.emissions = []
        self._hashes[index] = hashes
        self._rng[index] = rng
        self.records.append(rec)
        self.running += 1
        return rec

    def _idle(self, now: float) -> bool:
        """Whether a request admitted now pays the idle penalty: the knob is on, nothing runs, and the last
        request ended at least idle_after_s ago (the first request after boot is the cold turn's, not this)."""
        cfg = self.cfg
        return (
            cfg.idle_after_s > 0
            and self.running == 0
            and self._last_end is not None
            and now - self._last_end >= cfg.idle_after_s
        )

    @staticmethod
    def _geometric(rng: random.Random, mean: float) -> int:
        """Natural length >= 1 with the given mean (per-token EOS hazard 1/mean)."""
        p = 1.0 / mean
        if p >= 1.0:
            return 1
        return 1 + int(math.log(1.0 - rng.random()) / math.log(1.0 - p))

    def next_target(self, rec: RequestTruth, prev_target: float) -> float:
        """Absolute time of this request's next decode step."""
        cfg = self.cfg
        t = prev_target + cfg.step_time(self.decoding, rec.cold, rec.rate_factor)
        for start, end, index in self._prefills:
            if index != rec.index and start < t < end:
                if cfg.prefill_chunk_tokens:
                    t = min(t + cfg.prefill_chunk_tokens / cfg.prefill_rate(False), end)
                else:
                    t = end
        return t

    def first_token(self, rec: RequestTruth, now: float, target: float) -> int:
        """Prefill done: the first token is emitted now. Returns the number of tokens (1)."""
        self._insert(self._hashes.pop(rec.index, []))
        self.c.prompt_tokens += rec.prompt_tokens
        self.decoding += 1
        rec.t_first = now
        rec.t_first_target = target
        self._emitted(rec, 1, now, target)
        return 1

    def step(self, rec: RequestTruth, now: float, target: float, drafts: int | None = None) -> int:
        """One decode step, emitted now: returns tokens it carries (1 + accepted drafts, truncated at the end).
        `drafts`: draft tokens it verifies (None: K; the step scheduler's may verify fewer, or none)."""
        rec.steps += 1
        n = 1
        k = self.drafter.k if self.drafter is not None and drafts is None else (drafts or 0)
        if self.drafter is not None and k > 0:
            acc = min(k, self.drafter.accepted(self._rng[rec.index], rec.content))
            rec.drafts += 1
            rec.draft_tokens += k
            rec.accepted += acc
            self.c.spec_drafts += 1
            self.c.spec_draft_tokens += k
            self.c.spec_accepted += acc
            for i in range(acc):
                rec.accepted_per_pos[i] += 1
                self.c.spec_accepted_per_pos[i] += 1
            n += acc
        n = min(n, rec.target_tokens - rec.completion_tokens)
        self._emitted(rec, n, now, target)
        return n

    def _emitted(self, rec: RequestTruth, n: int, now: float, target: float) -> None:
        rec.completion_tokens += n
        rec.chunks += 1
        rec.t_last = now
        rec.t_last_target = target
        late = now - target
        if late > rec.max_lateness:
            rec.max_lateness = late
        if rec.emissions is not None:
            rec.emissions.append((target, now, n))
        self.c.generation_tokens += n

    def finish(self, rec: RequestTruth, status: str, reason: str | None = None) -> None:
        """Request over (finished, aborted by the client, or ended by a fault); idempotent."""
        if rec.status != "running":
            return
        rec.status = status
        rec.finish_reason = reason
        self.running -= 1
        self._last_end = self.clock()
        if rec.t_first is not None:
            self.decoding -= 1
        self._hashes.pop(rec.index, None)
        self._rng.pop(rec.index, None)
        c = self.c
        c.finished_prompt_tokens += rec.prompt_tokens
        c.finished_generation_tokens += rec.completion_tokens
        c.finished_cached_tokens += rec.cached_tokens
        c.finished_verify_calls += rec.steps
        if self.drafter is not None and rec.steps:
            c.accept_tokens_since_flush += rec.steps + rec.accepted
            c.forward_ct_since_flush += rec.steps
            c.last_accept_length = (rec.steps + rec.accepted) / rec.steps
            c.last_accept_rate = rec.accepted / max(1, rec.draft_tokens)
        if status == "finished" and reason:
            c.success[reason] = c.success.get(reason, 0) + 1
        if rec.t_first is not None:
            c.ttft.observe(rec.t_first - rec.t_arrival)
            c.queue_time.observe(rec.t_prefill_start - rec.t_arrival)
            c.prefill_time.observe(rec.t_prefill_end - rec.t_prefill_start)
            if rec.t_last is not None:
                c.decode_time.observe(rec.t_last - rec.t_first)
                c.e2e.observe(rec.t_last - rec.t_arrival)

    @property
    def avg_spec_accept_length(self) -> float:
        """SGLang /server_info value: accepted tokens (bonus included) per forward since boot/flush, floor 1."""
        c = self.c
        return (
            max(1.0, c.accept_tokens_since_flush / c.forward_ct_since_flush)
            if c.forward_ct_since_flush
            else 1.0
        )
