"""Records in, RunSummary out: the named measures (labkit/measure/records.py), each with its samples, range
and method, plus the run's counters (acceptance, prefix cache, NFS) and notes on what was excluded and why.

Pure: everything the summary says comes from the records and the counter deltas passed in.
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.measure import io_probe as iop
from labkit.measure import metrics as mx
from labkit.measure.recording import BURST_FLAG
from labkit.measure.records import GroupRecord, RequestRecord, RunSummary
from labkit.measure.timing import BURST_GAP_NS, median
from labkit.recipe import MeasurePlan

DECODE_WINDOW = (
    "decode: (N - n_first) / (t_last - t_first); t_first/n_first = last stamp/tokens of the first "
    f"arrival (chunks stamped < {BURST_GAP_NS // 1000} us apart), t_last = last token-bearing chunk "
    "(not [DONE]); burst-read samples excluded"
)
AGG_WINDOW = (
    "cK agg: tokens of all streams inside the steady window W = [max t_first, min t_last] / |W|, each "
    "chunk's tokens spread over the gap since its stream's previous chunk; also stored: whole chunks "
    "in W / |W|, and span = sum(N - n_first) / (max t_last - min t_first)"
)
PREFILL_WINDOW = (
    "prefill: (P - C) / (t_first - t_send - RTT), t_first = first token-bearing chunk (not the role "
    "prelude), P = usage.prompt_tokens; raw = P / TTFT"
)


def summarize(
    records: Sequence[RequestRecord],
    groups: Sequence[GroupRecord],
    plan: MeasurePlan,
    *,
    acceptance: mx.Acceptance | None = None,
    pc_window: Sequence[tuple[float, float]] = (),
    notes: Sequence[str] = (),
    rtt_ns: int = 0,
    counter_kind: str = "",
    io: dict[str, dict[str, float]] | None = None,
) -> RunSummary:
    """The RunSummary of one run. `pc_window`: (hits, queries) prefix-cache deltas of the prefill samples;
    `notes`: the run's own notes, put before the summary's."""
    s = RunSummary()
    ok = [r for r in records if r.ok]
    s.n_ok, s.n_failed = len(ok), len(records) - len(ok)
    sources = sorted({r.output_tokens_source for r in ok if r.output_tokens_source})
    src = ", ".join(sources) or "none"
    _decode_measures(s, ok, groups, src)
    _prefill_measures(s, ok, plan.prefill.prompt_tokens, rtt_ns, counter_kind)
    if acceptance is not None:
        _acceptance_measures(s, acceptance)
    if pc_window:
        hits = sum(h for h, _ in pc_window)
        queries = sum(q for _, q in pc_window)
        s.counters.update(prefix_cache_hits=hits, prefix_cache_queries=queries)
        if queries:
            s.measures["prefix_cache_hit_ratio"] = hits / queries
            s.method["prefix_cache_hit_ratio"] = "Δhits/Δqueries over prefill samples (unique prompts: ~0)"
    if io:
        nfs_summary(s, io)
    if s.n_failed:
        s.notes.append(
            f"{s.n_failed} failed request(s) excluded: "
            + "; ".join(sorted({r.error for r in records if not r.ok}))[:300]
        )
    s.notes = list(notes) + s.notes
    return s


def _put(s: RunSummary, key: str, values: list[float | None], how: str) -> None:
    """One measure: the median of the samples that exist, with the samples, their range and the method."""
    values = [v for v in values if v is not None]
    if not values:
        return
    s.measures[key] = median(values)
    s.samples[key] = values
    s.ranges[key] = [min(values), max(values)]
    s.method[key] = how


def _decode_measures(s: RunSummary, ok: list[RequestRecord], groups: Sequence[GroupRecord], src: str) -> None:
    dec_all = [r for r in ok if r.phase == "decode"]
    dec = [r for r in dec_all if BURST_FLAG not in r.flags]
    if len(dec) < len(dec_all):
        s.notes.append(
            f"decode: {len(dec_all) - len(dec)} burst-read sample(s) excluded (the client fell "
            "behind the stream; see the records' flags)"
        )
    _put(
        s,
        "decode_c1",
        [r.decode_tps for r in dec if r.concurrency == 1 and not r.cold],
        f"median over warm c1 turns; {DECODE_WINDOW}; tokens: {src}; timer: perf_counter_ns",
    )
    _put(
        s,
        "decode_c1_cold",
        [r.decode_tps for r in dec if r.cold],
        "the first request after boot (cold turn), same formula as decode_c1",
    )
    # burst-read samples keep their TTFT sample
    _put(
        s,
        "ttft_c1",
        [r.ttft_s for r in dec_all if r.concurrency == 1 and not r.cold],
        "median t_first - t_send of warm c1 decode turns, seconds",
    )
    for k in sorted({g.concurrency for g in groups}):
        gs = [g for g in groups if g.concurrency == k and g.ok]
        _put(
            s,
            f"decode_c{k}_agg",
            [g.agg_tps for g in gs if not g.serialised and not g.burst_streams],
            f"median over lockstep groups of {k}; {AGG_WINDOW}; tokens: {src}",
        )
        _put(
            s,
            f"decode_c{k}_span",
            [g.span_tps for g in gs if not g.burst_streams],
            f"span estimator, {k} streams",
        )
        _put(s, f"decode_c{k}_overlap", [g.overlap for g in gs], "|steady window| / span")
        if any(g.serialised for g in gs):
            s.notes.append(f"c{k}: {sum(g.serialised for g in gs)} group(s) ran serialised (no overlap)")


def _prefill_measures(
    s: RunSummary, ok: list[RequestRecord], targets: Sequence[int], rtt_ns: int, counter_kind: str
) -> None:
    pre = [r for r in ok if r.phase == "prefill"]
    for target in targets:
        rows = [r for r in pre if r.prompt_target == target]
        clean = [r for r in rows if "prefix-cache-hit" not in r.flags and "prompt-length-off" not in r.flags]
        if len(clean) < len(rows):
            s.notes.append(f"prefill_{target}: {len(rows) - len(clean)} flagged sample(s) excluded")
        _put(
            s,
            f"prefill_{target}",
            [r.prefill_tps for r in clean],
            f"median; {PREFILL_WINDOW}; RTT {rtt_ns / 1e6:.2f} ms; prompt length via {counter_kind}",
        )
        _put(s, f"prefill_{target}_raw", [r.prefill_tps_raw for r in clean], "P / TTFT, no RTT correction")
        _put(s, f"prefill_{target}_ttft", [r.ttft_s for r in clean], "median TTFT, seconds")


def _acceptance_measures(s: RunSummary, a: mx.Acceptance) -> None:
    s.measures.update(accept_per_draft=a.per_draft, accept_length=a.length, accept_k=a.k, accept_rate=a.rate)
    for i, v in enumerate(a.per_pos):
        s.measures[f"accept_pos_{i}"] = v
    for key in ("accept_per_draft", "accept_length", "accept_k", "accept_rate"):
        s.method[key] = a.method + " over the decode window (cold, warmup, c1, cK)"
    s.counters.update(spec_accepted=a.accepted, spec_drafts=a.drafts)
    if a.draft_tokens is not None:
        s.counters["spec_draft_tokens"] = a.draft_tokens


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
