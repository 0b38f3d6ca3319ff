"""Prometheus text scrapes turned into per-run numbers: counter deltas, spec acceptance, prefix-cache hits.

Per-run values only ever come from two scrapes (before the window, after every response completed), each
counter summed over all label sets (DP engines, model names). A negative delta means the server restarted in
between: the run is invalid for these numbers. Cumulative since-boot values are never reported
(docs/engines.md, "Metrics labkit reads"; docs/measurement.md, "Per-run counter deltas").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

Samples = dict[str, list[tuple[dict[str, str], float]]]

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


class CounterReset(ValueError):
    """A counter went backwards between two scrapes: the engine restarted inside the window."""


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_prometheus(text: str) -> Samples:
    """{metric name: [(labels, value), ...]} from Prometheus text exposition; comments and junk lines skipped."""
    out: Samples = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            continue
        name, _, labels, value = m.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        lab = {k: _unescape(val) for k, val in _LABEL.findall(labels or "")}
        out.setdefault(name, []).append((lab, v))
    return out


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
S_GEN = ("sglang:generation_tokens_total", "sglang:generation_tokens")
S_VERIFY = ("sglang:spec_verify_calls_total", "sglang:spec_verify_calls")
S_DRAFT_TOKENS = ("sglang:spec_num_draft_tokens",)
S_CACHED = ("sglang:cached_tokens_total", "sglang:cached_tokens")
S_PROMPT = ("sglang:prompt_tokens_total", "sglang:prompt_tokens")


@dataclass
class Acceptance:
    """Speculative acceptance over one window, from counter deltas. Render with `describe()`, never as 'x of K'
    alone: the bonus-token convention must be named (docs/measurement.md, "Speculative acceptance conventions")."""

    accepted: float  # ΔA (vLLM) or Δgen - Δverify (SGLang)
    drafts: float  # ΔD: drafting steps (vLLM) or verify calls (SGLang)
    draft_tokens: float | None  # ΔT: draft tokens proposed
    k: float | None  # K: draft tokens per step
    per_pos: list[float] = field(default_factory=list)  # ΔA_pos[i] / ΔD
    method: str = ""

    @property
    def per_draft(self) -> float:
        """ā: accepted draft tokens per step, bonus token excluded (0..K)."""
        return self.accepted / self.drafts

    @property
    def length(self) -> float:
        """τ = 1 + ā: tokens per target forward pass, bonus token included (1..K+1)."""
        return 1.0 + self.per_draft

    @property
    def rate(self) -> float | None:
        """α = ΔA / ΔT (= ā/K)."""
        if self.draft_tokens:
            return self.accepted / self.draft_tokens
        if self.k:
            return self.per_draft / self.k
        return None

    def describe(self) -> str:
        k = f"{self.k:g}" if self.k else "?"
        rate = f", α {self.rate * 100:.1f}%" if self.rate is not None else ""
        return f"{self.per_draft:.2f} of {k} accepted per step (τ {self.length:.2f} incl. bonus{rate})"


def spec_acceptance(
    before: Samples, after: Samples, k_hint: float | None = None, n_requests: int | None = None
) -> Acceptance | None:
    """Acceptance over the window between two scrapes; None when the engine exposes no spec counters or
    drafted nothing. Raises CounterReset on a restart.

    SGLang counts generated tokens per request including the one produced by prefill, so Δgen/Δverify is
    biased high by one token per request; with `n_requests` (generation requests that finished inside the
    window) that token is taken out: ā = (Δgen - n_requests - Δverify) / Δverify."""
    drafts = delta(before, after, *V_DRAFTS)
    if drafts is not None:
        if drafts <= 0:
            return None
        accepted = delta(before, after, *V_ACCEPTED) or 0.0
        tokens = delta(before, after, *V_DRAFT_TOKENS)
        k = tokens / drafts if tokens else k_hint
        positions = sorted(
            {lab.get("position", "") for name in V_PER_POS for lab, _ in after.get(name, [])},
            key=lambda p: int(p) if p.isdigit() else 1 << 30,
        )
        per_pos = []
        for pos in positions:
            d = delta(before, after, *V_PER_POS, where={"position": pos})
            per_pos.append((d or 0.0) / drafts)
        return Acceptance(
            accepted,
            drafts,
            tokens,
            k,
            per_pos,
            "vllm counters: ā=ΔA/ΔD, τ=1+ΔA/ΔD, α=ΔA/ΔT, summed over engine labels",
        )
    verify = delta(before, after, *S_VERIFY)
    if verify is not None:
        gen = delta(before, after, *S_GEN)
        if not verify or gen is None:
            return None
        width = largest(after, *S_DRAFT_TOKENS)
        k = (width - 1) if width and width > 1 else k_hint
        if n_requests is not None:
            return Acceptance(
                gen - n_requests - verify,
                verify,
                k * verify if k else None,
                k,
                [],
                f"sglang counters: ā=(Δgeneration_tokens - {n_requests} prefill tokens - "
                "Δspec_verify_calls)/Δspec_verify_calls, τ=1+ā",
            )
        return Acceptance(
            gen - verify,
            verify,
            k * verify if k else None,
            k,
            [],
            "sglang counters: τ=Δgeneration_tokens/Δspec_verify_calls (biased high by ~1/N: the "
            "prefill token is included), ā=τ-1",
        )
    return None


def prefix_cache(before: Samples, after: Samples) -> tuple[float, float] | None:
    """(hit tokens, queried tokens) over the window; None when the engine exposes neither counter pair."""
    q = delta(before, after, *V_PC_QUERIES)
    if q is not None:
        return delta(before, after, *V_PC_HITS) or 0.0, q
    p = delta(before, after, *S_PROMPT)
    if p is not None:
        return delta(before, after, *S_CACHED) or 0.0, p
    return None


def server_info_acceptance(info: dict) -> Acceptance | None:
    """SGLang without spec counters: `avg_spec_accept_length` from GET /server_info, valid for a window only when
    POST /flush_cache reset it (idle) right before the window. τ includes the bonus token, floor 1."""
    states = info.get("internal_states") or [{}]
    tau = states[0].get("avg_spec_accept_length") if isinstance(states[0], dict) else None
    if tau is None:
        return None
    width = info.get("speculative_num_draft_tokens")
    k = float(width - 1) if isinstance(width, int | float) and width > 1 else None
    # Expressed as one "draft" of ā accepted tokens so per_draft/length/rate read as usual.
    return Acceptance(
        float(tau) - 1.0,
        1.0,
        k,
        k,
        [],
        "sglang /server_info avg_spec_accept_length after POST /flush_cache (τ incl. bonus, floor 1)",
    )
