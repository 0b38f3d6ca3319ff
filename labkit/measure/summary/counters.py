"""The counter-derived measures of a run's summary: speculative acceptance over the decode window, the
prefill samples' prefix-cache hit ratio, NFS bytes read, and the telemetry headline figures (energy per
token per window, the decode window's lowest node SM clock), each with how it was computed.

Pure: counter deltas and summary.telemetry in, measures and counters written onto the RunSummary.
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.measure.records import RunSummary
from labkit.measure.server import metrics as mx
from labkit.measure.telemetry import io_probe as iop
from labkit.measures import measure_key, prefill_tokens

PROPOSED = "mean draft tokens proposed per drafting step (≤ K: ngram proposes fewer without a match)"
DRAFTED = "the share of decode steps (per request) in which the drafter proposed anything"


def acceptance_figures(a: mx.Acceptance, window: str) -> dict[str, tuple[float | None, str]]:
    """{measure: (value, how)} of one window's acceptance (`window` ends each method: " over the ...")."""
    return {
        "accept_per_draft": (a.per_draft, f"{a.method}; ā = ΔA/ΔD, accepted per drafting step{window}"),
        "accept_k": (a.k, f"K: {a.k_source}"),
        "accept_length": (a.length, f"τ = {a.tau_method}{window}"),
        "accept_length_stream": (a.length_stream, f"{mx.STREAM_TAU}{window}"),
        "accept_proposed_per_draft": (a.proposed_per_draft, f"ΔT/ΔD: {PROPOSED}{window}"),
        "accept_drafted_share": (a.drafted_share, f"ΔD / Δinter_token_latency_seconds_count: {DRAFTED}"),
        "accept_rate": (a.rate, f"α = ΔA/ΔT (else ā/K){window}"),
    }


def acceptance_measures(s: RunSummary, a: mx.Acceptance) -> None:
    """The decode window's speculative acceptance as measures, and its raw counter deltas as counters."""
    figures = acceptance_figures(a, " over the decode window (cold, warmup, c1, cK)")
    for key, (value, how) in figures.items():
        if value is not None:
            s.measures[key], s.method[key] = value, how
    for i, v in enumerate(a.per_pos):
        s.measures[measure_key("accept_pos_<i>", position=i)] = v
    s.counters.update(spec_accepted=a.accepted, spec_drafts=a.drafts)
    for key, value in (
        ("spec_draft_tokens", a.draft_tokens),
        ("spec_tokens", a.tokens),
        ("spec_steps", a.steps),
        ("stream_tokens", a.stream_tokens),
        ("stream_chunks", a.stream_chunks),
    ):
        if value is not None:
            s.counters[key] = value


def prefix_cache_measures(s: RunSummary, pc_window: Sequence[tuple[float, float]]) -> None:
    """The prefill samples' (hits, queries) prefix-cache deltas, summed, and their ratio."""
    hits = sum(h for h, _ in pc_window)
    queries = sum(q for _, q in pc_window)
    s.counters.update(prefix_cache_hits=hits, prefix_cache_queries=queries)
    if queries:
        s.measures["prefix_cache_hit_ratio"] = hits / queries
        s.method["prefix_cache_hit_ratio"] = "Δhits/Δqueries over prefill samples (unique prompts: ~0)"


def nfs_summary(s: RunSummary, io: dict[str, dict[str, float]]) -> None:
    """NFS bytes read, only where a probe saw an NFS mount: a node without one proves nothing about
    the NAS, and a counter that went backwards (remount) is reported, never counted as zero."""
    seen = sorted(name for name, d in io.items() if any(k.endswith(":serverreadbytes") for k in d))
    reset = sorted(name for name, d in io.items() if any(k.endswith(":serverreadbytes.reset") for k in d))
    if reset:
        s.notes.append(
            f"shared-NFS reads not recorded: the counters went backwards on {', '.join(reset)} "
            "(remount or reboot during the run)"
        )
        return
    if not seen:
        s.notes.append(f"shared-NFS reads not measured: no NFS mount seen by {', '.join(sorted(io))}")
        return
    nfs = sum(iop.server_read_bytes(io[name]) for name in seen)
    s.measures["nfs_read_bytes"] = nfs
    s.method["nfs_read_bytes"] = f"Δserverreadbytes of the NFS mounts on {', '.join(seen)}, whole run"
    if s.n_ok:
        s.measures["nfs_read_bytes_per_completion"] = nfs / s.n_ok


ENERGY = (
    "Σ over the nodes' GPUs of ∫ nvidia-smi power.draw dt (trapezoid over the samples on labkit's clock, the "
    "power at the window's edges interpolated)"
)


def telemetry_measures(s: RunSummary) -> None:
    """The headline telemetry figures from summary.telemetry: energy per token per window and the decode
    window's lowest node SM-clock median, each with how it was computed."""
    t = s.telemetry
    nodes = sorted(n for n, v in t.get("nodes", {}).items() if v.get("gpu_samples"))
    decode = t.get("decode", {})
    if "joules_per_token" in decode:
        s.measures["energy_per_token_decode"] = decode["joules_per_token"]
        s.method["energy_per_token_decode"] = (
            f"J per output token: {ENERGY} over the decode window (first to last decode request of each "
            f"repetition), / the output tokens of the requests inside it; nodes {', '.join(nodes)}"
        )
    for name, win in t.items():
        tokens = prefill_tokens(name)  # a prefill window is named as its headline key
        if tokens is not None and "joules_per_token" in win:
            key = measure_key("energy_per_token_prefill_<P>", prompt=tokens)
            s.measures[key] = win["joules_per_token"]
            s.method[key] = (
                f"J per prompt token: {ENERGY} over each clean sample's t_send..t_end, / the samples' "
                f"prompt tokens less cached ones; nodes {', '.join(nodes)}"
            )
    medians = {
        n: v["sm_clock_median_mhz"] for n, v in decode.get("nodes", {}).items() if "sm_clock_median_mhz" in v
    }
    if medians:
        low = min(medians, key=lambda n: medians[n])
        s.measures["sm_clock_decode_median"] = medians[low]
        s.method["sm_clock_decode_median"] = (
            f"MHz: the lowest node median of nvidia-smi clocks.sm over the decode window's samples ({low})"
        )
