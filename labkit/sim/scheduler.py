"""The simulator's step scheduler, its default schedule: engine steps with a token budget, a cap on running
sequences, a KV pool in blocks with preemption, so prefill and decode share each forward pass as on vLLM's V1
engine (max_num_batched_tokens=0 keeps engine.py's per-request schedule instead).

Pure bookkeeping with an injected clock and no I/O: the server's engine loop (steps.py) and the tests drive it
alike, `plan()` the next step, wait until its end, `complete()` it. Request records, counters and the prefix
cache stay SimEngine's (engine.py); this module decides what each step runs and when it ends.

One step (`plan`):
1. decodes: every running request past its prefill gets one token, in admission order, while the budget
   (max_num_batched_tokens) lasts. With speculative decoding a decode also verifies the drafter's K draft tokens
   (fewer when the budget has less left), so it takes 1 + K tokens of the budget. A decode of a request that has
   generated g tokens needs ceil((P + g + drafts) / block size) KV blocks (P: prompt tokens); when one more block
   is needed and none is free, the most recently admitted running request not yet in this step is preempted
   (recompute: its blocks are freed, it goes to the front of the waiting queue and will prefill its prompt and
   generated tokens again), possibly the request itself.
2. prefill chunks of running requests still in prefill, in admission order, each min(what is left, budget).
3. admission from the waiting queue, in order (preempted requests first), while budget is left, fewer than
   max_num_seqs run (0: no cap), the request arrived before the step starts and the KV blocks of its whole
   prompt (P + g when recomputing) are free; its first chunk runs in this step. The head blocks the queue.
A step lasts step_token_s x its tokens, plus, when it decodes, step_base_s once and step_seq_s per decode
(SimConfig.step_costs; derived from decode_tps, prefill_tps and batch_beta when unset, so a lone stream, a lone
prompt and a batch of streams run as in the per-request schedule of engine.py). A slowed sequence's share (its
tokens' cost, and a decode's step_seq_s) is multiplied by its slowness and the base by the largest slowness among
the step's decodes (`duration`): a decode's slowness is 1 / its rate factor (decode_noise, the idle penalty,
decode_ctx_slope; cold_decode_tps for a cold request), a prefill chunk's idle_factor after idle (and prefill_tps /
cold_prefill_tps when cold). A request alone on the engine thus runs exactly as much slower as in the per-request
schedule; in a batch every request of a step shares its time.
Steps start when the previous one ended (targets chain, so wake-up jitter does not accumulate), or after idle at
the arrival of the request that ends it. At its end (`complete`) each decode emits one token plus the drafts the
drafter accepted (speculation.py; counted as engine.py counts them), and a prefill that completed emits the
request's next token (its first, or the one after a recompute, which verifies no drafts); a request that reached
its length leaves and frees its blocks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from labkit.sim.accounts import RequestTruth
from labkit.sim.engine import SimEngine


@dataclass(eq=False)
class Seq:
    """One request as the scheduler sees it: what it still has to prefill and the KV blocks it holds."""

    rec: RequestTruth
    prefill: int  # tokens to compute before its next token: uncached prompt (+ generated after a preemption)
    computed: int = 0  # of them, done
    blocks: int = 0
    running: bool = False  # in the running list (else waiting)

    @property
    def in_prefill(self) -> bool:
        return self.computed < self.prefill


@dataclass
class Emission:
    """Tokens one step gave one request: `before` tokens came earlier, `tokens` now; `done`: its last.
    A speculative decode verified `drafted` draft tokens and accepted `accepted` of them (0 and 0 otherwise)."""

    rec: RequestTruth
    before: int
    tokens: int
    first: bool
    done: bool
    target: float
    actual: float
    drafted: int = 0
    accepted: int = 0


@dataclass
class Step:
    """One planned engine step: what it runs, and when it starts and ends (targets, seconds)."""

    number: int
    start: float
    end: float
    decodes: list[Seq] = field(default_factory=list)
    drafts: list[int] = field(default_factory=list)  # draft tokens each decode verifies (speculation: K)
    chunks: list[tuple[Seq, int]] = field(default_factory=list)
    preempted: list[Seq] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return len(self.decodes) + sum(self.drafts) + sum(n for _, n in self.chunks)

    @property
    def seqs(self) -> int:
        return len(self.decodes) + len(self.chunks)


class StepScheduler:
    """The running list, the waiting queue and the KV pool of one simulated engine in step mode."""

    def __init__(self, engine: SimEngine):
        self.engine = engine
        self.cfg = engine.cfg
        self.total_blocks = self.cfg.kv_blocks
        self.used_blocks = 0
        self.running: list[Seq] = []  # admission order
        self.waiting: deque[Seq] = deque()
        self.steps = 0
        self._seqs: dict[int, Seq] = {}
        self._free_at = engine.t_boot  # target end of the last step

    # ---- requests in and out ----------------------------------------------------------------------
    def add(self, rec: RequestTruth) -> None:
        """A request arrived (SimEngine.admit with scheduled=False): it waits for a step to admit it."""
        seq = Seq(rec, rec.prompt_tokens - rec.cached_tokens)
        self._seqs[rec.index] = seq
        self.waiting.append(seq)

    def drop(self, rec: RequestTruth) -> None:
        """The request left before its end (client gone, stall fault): out of every list, its blocks freed."""
        seq = self._seqs.pop(rec.index, None)
        if seq is None:
            return
        if seq.running:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        self._free(seq)

    # ---- gauges -------------------------------------------------------------------------------------
    @property
    def kv_usage(self) -> float:
        """Share of the KV pool's blocks held by running requests (vllm:kv_cache_usage_perc)."""
        return self.used_blocks / self.total_blocks if self.total_blocks else 0.0

    def duration(self, step: Step) -> float:
        """Seconds of a planned step (SimConfig.step_costs): step_token_s per token, and when it decodes
        step_base_s once and step_seq_s per decode. A slowed sequence's share (its tokens' cost, and a decode's
        step_seq_s) is times its slowness and the base times the largest slowness among the decodes."""
        base, per_token, per_seq = self.cfg.step_costs
        decodes = [
            (self.decode_slowness(seq.rec), per_token * (1 + d) + per_seq)
            for seq, d in zip(step.decodes, step.drafts, strict=True)
        ]
        chunks = [(self.prefill_slowness(seq.rec), per_token * n) for seq, n in step.chunks]
        fixed = base * max(s for s, _ in decodes) if decodes else 0.0
        return fixed + sum(s * cost for s, cost in decodes + chunks)

    def decode_slowness(self, rec: RequestTruth) -> float:
        """How many times longer a request's decode share of a step lasts: 1 / its rate factor (decode_noise, the
        idle penalty, decode_ctx_slope), times decode_tps / cold_decode_tps for a cold request."""
        cfg = self.cfg
        cold = cfg.decode_tps / cfg.cold_decode_tps if rec.cold and cfg.cold_decode_tps > 0 else 1.0
        return cold / rec.rate_factor

    def prefill_slowness(self, rec: RequestTruth) -> float:
        """How many times longer a request's prefill chunk lasts: idle_factor after idle (the idle penalty), times
        prefill_tps / cold_prefill_tps for a cold request."""
        cfg = self.cfg
        return cfg.prefill_tps / cfg.prefill_rate(rec.cold) * (cfg.idle_factor if rec.idle else 1.0)

    # ---- one step -----------------------------------------------------------------------------------
    def plan(self, now: float) -> Step | None:
        """The next step, from the end of the last one, None when there is no work; on an idle engine from the
        arrival of the request at the head of the queue (at most `now`), so the loop's wake-up is no queue time.
        Admits, allocates and preempts; tokens are emitted by `complete`."""
        if not self.running and not self.waiting:
            return None
        start = self._free_at
        if not self.running:
            start = max(start, min(now, self.waiting[0].rec.t_arrival))
        step = Step(self.steps + 1, start, start)
        budget = self._decodes(step, self.cfg.max_num_batched_tokens)
        for seq in self.running:
            if budget <= 0:
                break
            if seq.in_prefill:
                n = min(seq.prefill - seq.computed, budget)
                step.chunks.append((seq, n))
                budget -= n
        self._admit(step, budget)
        if not step.seqs:
            return None
        self.steps += 1
        step.end = start + self.duration(step)
        return step

    def _decodes(self, step: Step, budget: int) -> int:
        """Decodes first, in admission order; preempts from the tail for a missing block. Returns the budget
        left."""
        bs = self.cfg.block_size
        k = self.engine.drafter.k if self.engine.drafter is not None else 0
        scheduled: set[int] = set()
        for seq in list(self.running):
            if budget <= 0:
                break
            if seq.in_prefill or not seq.running:
                continue
            drafts = min(k, budget - 1)
            need = max(0, -(-(seq.rec.prompt_tokens + seq.rec.completion_tokens + drafts) // bs) - seq.blocks)
            while need > self.total_blocks - self.used_blocks:
                victim = next((s for s in reversed(self.running) if id(s) not in scheduled), None)
                if victim is None:
                    break
                self._preempt(victim, step)
                if victim is seq:
                    break
            if not seq.running or need > self.total_blocks - self.used_blocks:
                continue
            scheduled.add(id(seq))
            seq.blocks += need
            self.used_blocks += need
            step.decodes.append(seq)
            step.drafts.append(drafts)
            budget -= 1 + drafts
        return budget

    def _admit(self, step: Step, budget: int) -> None:
        """Waiting requests in queue order into the step while budget, max_num_seqs and KV blocks allow."""
        cap, bs = self.cfg.max_num_seqs, self.cfg.block_size
        while self.waiting and budget > 0 and (cap == 0 or len(self.running) < cap):
            seq = self.waiting[0]
            if seq.rec.t_arrival > step.start or seq in step.preempted:
                break
            need = -(-(seq.rec.prompt_tokens + seq.rec.completion_tokens) // bs)
            if need > self.total_blocks - self.used_blocks:
                break
            self.waiting.popleft()
            self.running.append(seq)
            seq.running = True
            seq.blocks = need
            self.used_blocks += need
            if seq.rec.t_scheduled is None:
                seq.rec.t_scheduled = seq.rec.t_prefill_start = step.start
            n = min(seq.prefill - seq.computed, budget)
            step.chunks.append((seq, n))
            budget -= n

    def _preempt(self, seq: Seq, step: Step) -> None:
        """Recompute preemption: blocks freed, back to the front of the queue, its whole KV to compute again
        (the prompt's cached prefix excepted: its blocks stay in the prefix cache)."""
        self.running.remove(seq)
        seq.running = False
        self._free(seq)
        rec = seq.rec
        seq.prefill = rec.prompt_tokens - rec.cached_tokens + rec.completion_tokens
        seq.computed = 0
        rec.preemptions += 1
        self.engine.c.preemptions += 1
        self.waiting.appendleft(seq)
        step.preempted.append(seq)

    def _free(self, seq: Seq) -> None:
        self.used_blocks -= seq.blocks
        seq.blocks = 0

    def complete(self, step: Step, now: float) -> list[Emission]:
        """The step ended at `now` (its target is step.end): prefill progress, one token per decode and per
        completed prefill, finished requests out with their blocks freed."""
        eng, target = self.engine, step.end
        out: list[Emission] = []
        for seq, drafts in zip(step.decodes, step.drafts, strict=True):
            rec = seq.rec
            if rec.index in self._seqs:
                before, accepted = rec.completion_tokens, rec.accepted
                n_out = eng.step(rec, now, target, drafts)
                em = self._emission(seq, before, n_out, False, step, now)
                if eng.drafter is not None and drafts:
                    em.drafted, em.accepted = drafts, rec.accepted - accepted
                out.append(em)
        for seq, n in step.chunks:
            rec = seq.rec
            if rec.index not in self._seqs:
                continue
            seq.computed += n
            rec.prefill_chunks += 1
            if seq.in_prefill:
                continue
            before, first = rec.completion_tokens, rec.t_first is None
            if first:
                rec.t_prefill_end = target
                n_out = eng.first_token(rec, now, target)
            else:
                n_out = eng.step(rec, now, target, 0)  # the token after a recompute: no drafts to verify
            out.append(self._emission(seq, before, n_out, first, step, now))
        self._free_at = target
        return out

    def _emission(self, seq: Seq, before: int, n: int, first: bool, step: Step, now: float) -> Emission:
        rec = seq.rec
        done = rec.completion_tokens >= rec.target_tokens
        if done:
            self.drop(rec)
        return Emission(rec, before, n, first, done, step.end, now)
