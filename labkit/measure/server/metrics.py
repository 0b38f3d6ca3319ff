"""Prometheus text scrapes turned into per-run numbers: counter deltas, spec acceptance, prefix-cache hits, and
what the engine's own counters say about one window's requests.

Per-run values only ever come from two scrapes (before the window, after every response completed), each
counter summed over all label sets (DP engines, model names). A negative delta means the server restarted in
between: the run is invalid for these numbers. Cumulative since-boot values are never reported
(docs/engines.md, "Metrics labkit reads"; docs/measurement.md, "Per-run counter deltas").
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from labkit.recipe import EngineSpec

# The text parser is labkit.serve's (the lane's boot reads /metrics too); re-exported as this module's API.
from labkit.serve import Samples as Samples
from labkit.serve import parse_prometheus as parse_prometheus


class CounterReset(ValueError):
    """A counter went backwards between two scrapes: the engine restarted inside the window."""


def total(samples: Samples, *names: str, where: dict[str, str] | None = None) -> float | None:
    """Sum of the first metric name present, over all label sets matching `where`; None when absent."""
    for name in names:
        if name in samples:
            rows = [
                v for lab, v in samples[name] if not where or all(lab.get(k) == x for k, x in where.items())
            ]
            vals = [v for v in rows if not math.isnan(v)]
            return sum(vals) if vals else None
    return None


def largest(samples: Samples, *names: str) -> float | None:
    """Largest value over the label sets of the first metric name present: for a configuration gauge that
    every rank exports (summing it would count one setting once per rank)."""
    for name in names:
        if name in samples:
            vals = [v for _, v in samples[name] if not math.isnan(v)]
            return max(vals) if vals else None
    return None


def delta(before: Samples, after: Samples, *names: str, where: dict[str, str] | None = None) -> float | None:
    """after - before of a counter summed over labels; raises CounterReset on a negative delta."""
    b, a = total(before, *names, where=where), total(after, *names, where=where)
    if a is None:
        return None
    d = a - (b or 0.0)
    if d < 0:
        raise CounterReset(f"{names[0]} went from {b} to {a}: the engine restarted during the run")
    return d


# Names as exposed by prometheus_client (counters get `_total`); both spellings are accepted.
V_DRAFTS = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_drafts")
V_DRAFT_TOKENS = ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_draft_tokens")
V_ACCEPTED = ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens")
V_PER_POS = (
    "vllm:spec_decode_num_accepted_tokens_per_pos_total",
    "vllm:spec_decode_num_accepted_tokens_per_pos",
)
V_PC_HITS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
V_PC_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
V_GEN = ("vllm:generation_tokens_total", "vllm:generation_tokens")
# One observation per request per engine step that gave it tokens: its first step (TTFT), then every later one
# (inter-token latency; `time_per_output_token_seconds` before vLLM 0.10). Their counts sum to request steps.
V_TTFT_COUNT = ("vllm:time_to_first_token_seconds_count",)
V_ITL_COUNT = ("vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count")
V_PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")  # running requests sent back to wait
# the share of the KV pool in use (vLLM's current and older names, SGLang's), a live gauge
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
V_ENGINE_STEPS = ("vllm:iteration_tokens_total_count",)  # one per engine step with output, whatever the batch
S_GEN = ("sglang:generation_tokens_total", "sglang:generation_tokens")
S_VERIFY = ("sglang:spec_verify_calls_total", "sglang:spec_verify_calls")
S_DRAFT_TOKENS = ("sglang:spec_num_draft_tokens",)
S_CACHED = ("sglang:cached_tokens_total", "sglang:cached_tokens")
S_PROMPT = ("sglang:prompt_tokens_total", "sglang:prompt_tokens")

VLLM_STEPS_METHOD = (
    "Δvllm:generation_tokens / Δ(time_to_first_token_seconds_count + inter_token_latency_seconds_count): "
    "tokens per request per engine step that gave it tokens; each request's prefill step counts as a step "
    "(1 token)"
)

STREAM_TAU = (
    "tokens per token-bearing SSE chunk of the window's streams (vLLM sends one chunk per engine step per "
    "request unless its output queue merged steps, which reads high)"
)


@dataclass
class Acceptance:
    """Speculative acceptance over one window, from counter deltas. Render with `describe()`, never as
    'x of K' alone: the bonus-token convention must be named. K is the configured number of draft tokens (an
    integer), with where it came from (docs/measurement.md, "Speculative acceptance conventions")."""

    accepted: float  # ΔA (vLLM) or Δgen - Δverify (SGLang)
    drafts: float  # ΔD: drafting steps (vLLM: request steps in which the drafter proposed ≥ 1 token)
    draft_tokens: float | None  # ΔT: draft tokens proposed
    k: int | None  # K: the configured draft tokens per step
    per_pos: list[float] = field(default_factory=list)  # ΔA_pos[i] / ΔD
    method: str = ""
    k_source: str = ""  # where K came from (recipe, /metrics per-position series, SGLang gauge)
    tokens: float | None = None  # τ's numerator: tokens generated in the window
    steps: float | None = None  # τ's denominator: request steps that produced them
    tau_method: str = ""  # how tokens and steps were counted
    decode_steps: float | None = None  # request steps after each request's first (those that could draft)
    stream_tokens: float | None = None  # the window's streams: tokens ...
    stream_chunks: float | None = None  # ... and token-bearing SSE chunks (vLLM: one per step unless merged)

    @property
    def per_draft(self) -> float:
        """ā: accepted draft tokens per drafting step, bonus token excluded (0..K)."""
        return self.accepted / self.drafts

    @property
    def length(self) -> float | None:
        """τ: tokens per request per engine step, bonus token included (1..K+1); None when not counted."""
        if not self.steps:
            return None
        assert self.tokens is not None  # set together with steps (and pooled to None together)
        return self.tokens / self.steps

    @property
    def length_stream(self) -> float | None:
        """Tokens per token-bearing SSE chunk of the window's streams (τ seen by the client)."""
        if not self.stream_chunks:
            return None
        assert self.stream_tokens is not None  # set together with stream_chunks
        return self.stream_tokens / self.stream_chunks

    @property
    def proposed_per_draft(self) -> float | None:
        """ΔT/ΔD: mean draft tokens proposed per drafting step (≤ K; ngram proposes fewer without a match)."""
        return self.draft_tokens / self.drafts if self.draft_tokens is not None else None

    @property
    def drafted_share(self) -> float | None:
        """ΔD / decode steps: the share of decode steps in which the drafter proposed anything."""
        return self.drafts / self.decode_steps if self.decode_steps else None

    @property
    def rate(self) -> float | None:
        """α = ΔA / ΔT (= ā/K when every step proposes K)."""
        if self.draft_tokens:
            return self.accepted / self.draft_tokens
        if self.k:
            return self.per_draft / self.k
        return None

    def describe(self) -> str:
        k = str(self.k) if self.k is not None else "?"
        extra = [f"τ {self.length:.2f} tokens per engine step"] if self.length is not None else []
        if self.rate is not None:
            extra.append(f"α {self.rate * 100:.1f}%")
        text = f"{self.per_draft:.2f} of {k} accepted per drafting step (ā, bonus excluded"
        return text + "".join(f"; {e}" for e in extra) + ")"


def configured_k(engine: EngineSpec) -> tuple[int, str] | None:
    """(K, source) from a recipe's engine args: vLLM `--speculative-config` JSON `num_speculative_tokens`, or
    SGLang `--speculative-num-draft-tokens` (the verify width, K + 1); None when the recipe states neither."""
    cfg = engine.arg("--speculative-config")
    if cfg:
        try:
            return int(json.loads(cfg[0])["num_speculative_tokens"]), (
                "recipe --speculative-config num_speculative_tokens"
            )
        except (ValueError, KeyError, TypeError, IndexError):
            return None
    steps = engine.arg("--speculative-num-draft-tokens")
    if steps:
        try:
            return int(steps[0]) - 1, "recipe --speculative-num-draft-tokens - 1"
        except ValueError:
            return None
    return None


def _positions(after: Samples) -> list[str]:
    return sorted(
        {lab.get("position", "") for name in V_PER_POS for lab, _ in after.get(name, [])},
        key=lambda p: int(p) if p.isdigit() else 1 << 30,
    )


def vllm_k(positions: list[str], k_hint: int | None, hint_source: str) -> tuple[int | None, str]:
    """K: the configured one when the caller knows it, else the number of per-position series vLLM exports
    (one per draft position, 0..K-1, from boot)."""
    series = len(positions) if positions == [str(i) for i in range(len(positions))] else 0
    if k_hint is not None:
        source = hint_source or "given by the caller"
        if series and series != k_hint:
            source += f" (but /metrics has {series} per-position series)"
        return k_hint, source
    if series:
        return series, f"/metrics: {series} per-position series {V_PER_POS[0]}"
    return None, "unknown: no per-position series and no configured K"


def _vllm_acceptance(
    before: Samples, after: Samples, drafts: float, k_hint: int | None, hint_source: str
) -> Acceptance:
    accepted = delta(before, after, *V_ACCEPTED) or 0.0
    tokens = delta(before, after, *V_DRAFT_TOKENS)
    positions = _positions(after)
    k, k_source = vllm_k(positions, k_hint, hint_source)
    per_pos = [(delta(before, after, *V_PER_POS, where={"position": p}) or 0.0) / drafts for p in positions]
    acc = Acceptance(
        accepted,
        drafts,
        tokens,
        k,
        per_pos,
        "vllm counters: ā=ΔA/ΔD, α=ΔA/ΔT, summed over engine labels",
        k_source=k_source,
    )
    gen = delta(before, after, *V_GEN)
    firsts, later = delta(before, after, *V_TTFT_COUNT), delta(before, after, *V_ITL_COUNT)
    if gen is not None and firsts is not None and later is not None and firsts + later > 0:
        acc.tokens, acc.steps, acc.decode_steps, acc.tau_method = (
            gen,
            firsts + later,
            later,
            VLLM_STEPS_METHOD,
        )
    return acc


def spec_acceptance(
    before: Samples,
    after: Samples,
    k_hint: int | None = None,
    n_requests: int | None = None,
    k_source: str = "",
) -> Acceptance | None:
    """Acceptance over the window between two scrapes; None when the engine exposes no spec counters or
    drafted nothing. Raises CounterReset on a restart. `k_hint`: the configured K (from `k_source`).

    SGLang counts generated tokens per request including the one produced by prefill, so Δgen/Δverify is
    biased high by one token per request; with `n_requests` (generation requests that finished inside the
    window) that token is taken out: ā = (Δgen - n_requests - Δverify) / Δverify."""
    drafts = delta(before, after, *V_DRAFTS)
    if drafts is not None:
        return _vllm_acceptance(before, after, drafts, k_hint, k_source) if drafts > 0 else None
    verify = delta(before, after, *S_VERIFY)
    if verify is None:
        return None
    gen = delta(before, after, *S_GEN)
    if not verify or gen is None:
        return None
    width = largest(after, *S_DRAFT_TOKENS)
    k: int | None
    if width and width > 1:
        k, source = int(width) - 1, "sglang:spec_num_draft_tokens - 1 (the verify width includes the root)"
    else:
        k, source = k_hint, k_source or ("given by the caller" if k_hint is not None else "unknown")
    made = gen - (n_requests or 0)
    if n_requests is not None:
        how = (
            f"sglang counters: ā=(Δgeneration_tokens - {n_requests} prefill tokens - "
            "Δspec_verify_calls)/Δspec_verify_calls"
        )
        tau = "(Δgeneration_tokens - prefill tokens) / Δspec_verify_calls: every decode step verifies"
    else:
        how = "sglang counters: ā=Δgeneration_tokens/Δspec_verify_calls - 1"
        tau = "Δgeneration_tokens / Δspec_verify_calls (biased high by ~1/N: the prefill token is included)"
    return Acceptance(
        made - verify,
        verify,
        k * verify if k else None,
        k,
        [],
        how,
        k_source=source,
        tokens=made,
        steps=verify,
        tau_method=tau,
    )


def prefix_cache(before: Samples, after: Samples) -> tuple[float, float] | None:
    """(hit tokens, queried tokens) over the window; None when the engine exposes neither counter pair."""
    q = delta(before, after, *V_PC_QUERIES)
    if q is not None:
        return delta(before, after, *V_PC_HITS) or 0.0, q
    p = delta(before, after, *S_PROMPT)
    if p is not None:
        return delta(before, after, *S_CACHED) or 0.0, p
    return None


def server_info_acceptance(info: dict[str, Any]) -> Acceptance | None:
    """SGLang without spec counters: `avg_spec_accept_length` from GET /server_info, valid for a window only when
    POST /flush_cache reset it (idle) right before the window. τ includes the bonus token, floor 1."""
    states = info.get("internal_states") or [{}]
    tau = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
    if tau is None:
        return None
    width = info.get("speculative_num_draft_tokens")
    k = int(width) - 1 if isinstance(width, int | float) and width > 1 else None
    # Expressed as one "draft" of ā accepted tokens so per_draft/length/rate read as usual.
    return Acceptance(
        float(tau) - 1.0,
        1.0,
        k,
        k,
        [],
        "sglang /server_info avg_spec_accept_length after POST /flush_cache (τ incl. bonus, floor 1)",
        k_source="/server_info speculative_num_draft_tokens - 1" if k is not None else "unknown",
        tokens=float(tau),
        steps=1.0,
        tau_method="sglang /server_info avg_spec_accept_length (per verify step, incl. bonus, floor 1)",
    )


# The engine's own view of a window's requests: histogram name -> the figure its mean gives (seconds).
SERVER_TIMES = {
    "ttft_s": "vllm:time_to_first_token_seconds",
    "queue_s": "vllm:request_queue_time_seconds",
    "prefill_s": "vllm:request_prefill_time_seconds",
    "decode_s": "vllm:request_decode_time_seconds",
    "e2e_s": "vllm:e2e_request_latency_seconds",
}


def server_window(before: Samples, after: Samples) -> dict[str, float] | None:
    """What vLLM's own counters say about the requests of one window: how many got a first token
    (`requests`), the mean of each time histogram over them (TTFT from arrival at the API server, queue,
    prefill, decode, end to end; seconds), tokens generated, request steps, engine steps and preemptions. None when the
    engine exports no TTFT histogram. Raises CounterReset on a restart.
    (docs/measurement.md, "Burst reads and the server's view")"""
    firsts = delta(before, after, f"{SERVER_TIMES['ttft_s']}_count")
    if firsts is None:
        return None
    out: dict[str, float] = {"requests": firsts}
    for key, name in SERVER_TIMES.items():
        n, s = delta(before, after, f"{name}_count"), delta(before, after, f"{name}_sum")
        if n and s is not None:
            out[key] = s / n
    gen, later = delta(before, after, *V_GEN), delta(before, after, *V_ITL_COUNT)
    engine_steps = delta(before, after, *V_ENGINE_STEPS)
    if gen is not None:
        out["generation_tokens"] = gen
    if later is not None:
        out["request_steps"] = firsts + later
    if engine_steps is not None:
        out["engine_steps"] = engine_steps
    preempted = delta(before, after, *V_PREEMPTIONS)
    if preempted is not None:
        out["preemptions"] = preempted
    return out
