"""Records in, RunSummary out: the named measures (labkit/measure/records.py), each with its samples, range
and method, plus the run's counters (acceptance, prefix cache, NFS), notes on what was excluded and why, and
each window's evidence with the flags it raises (docs/measurement.md, "Per-run evidence").

Pure: everything the summary says comes from the records and the counter deltas passed in.
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.measure import io_probe as iop
from labkit.measure import metrics as mx
from labkit.measure.recording import BURST_BLAME, BURST_FLAG, CACHE_HIT_TOLERANCE
from labkit.measure.records import GroupRecord, RequestRecord, RunSummary
from labkit.measure.scrapes import WindowEvidence, reset_message
from labkit.measure.telemetry import TelemetryRun, summarize_telemetry
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
SERVER_TTFT = (
    "Δvllm:time_to_first_token_seconds_sum / Δ_count between the scrapes around each turn (from the "
    "request's arrival at the engine's API server to its first token: no network, no client)"
)
PROPOSED = "mean draft tokens proposed per drafting step (≤ K: ngram proposes fewer without a match)"
DRAFTED = "the share of decode steps (per request) in which the drafter proposed anything"
# a prefill sample with one of these flags is left out of the medians (a restart: a sample of another boot)
PREFILL_EXCLUDED = ("prefix-cache-hit", "prompt-length-off", "counter-reset")
INTERVALS_OVER_RUNS = (
    "over runs (tables, labkit compare, measure.target_ci) this run's value of each measure is one sample: "
    "a 95 % Student-t interval on run means from 3 runs on (no bootstrap); Welch or paired t between lanes"
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
    windows: Sequence[WindowEvidence] = (),
    telemetry: TelemetryRun | None = None,
) -> RunSummary:
    """The RunSummary of one run. `pc_window`: (hits, queries) prefix-cache deltas of the prefill samples;
    `notes`: the run's own notes, put before the summary's; `windows`: what the engine's /metrics said about
    each window, pooled into `evidence` and worded as `flags` (docs/measurement.md, "Per-run evidence");
    `telemetry`: the nodes' samples, summarized per window with their health flags (docs/measurement.md,
    "Node telemetry")."""
    s = RunSummary(evidence=pooled_evidence(windows), flags=evidence_flags(windows))
    s.method["intervals"] = INTERVALS_OVER_RUNS
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
    if telemetry is not None:
        s.telemetry, flags = summarize_telemetry(
            telemetry, records, plan.prefill.prompt_tokens, PREFILL_EXCLUDED
        )
        s.flags += flags
        telemetry_measures(s)
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
        s.notes.append(burst_note([r for r in dec_all if BURST_FLAG in r.flags]))
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
    _put(
        s,
        "ttft_c1_server",
        [r.server_ttft_s for r in dec_all if r.concurrency == 1 and not r.cold],
        f"median of the engine's own TTFT over the same turns: {SERVER_TTFT}",
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
        _put(
            s,
            f"decode_c{k}_overlap",
            [g.overlap for g in gs if not g.burst_streams],
            "|steady window| / span (groups with burst-read streams excluded)",
        )
        if any(g.serialised for g in gs):
            s.notes.append(f"c{k}: {sum(g.serialised for g in gs)} group(s) ran serialised (no overlap)")
        burst = [g for g in gs if g.burst_streams]
        if burst:
            s.notes.append(group_burst_note(k, burst))


def _prefill_measures(
    s: RunSummary, ok: list[RequestRecord], targets: Sequence[int], rtt_ns: int, counter_kind: str
) -> None:
    pre = [r for r in ok if r.phase == "prefill"]
    for target in targets:
        rows = [r for r in pre if r.prompt_target == target]
        clean = [r for r in rows if not any(f in r.flags for f in PREFILL_EXCLUDED)]
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
    window = " over the decode window (cold, warmup, c1, cK)"
    figures = {
        "accept_per_draft": (a.per_draft, f"{a.method}; ā = ΔA/ΔD, accepted per drafting step{window}"),
        "accept_k": (a.k, f"K: {a.k_source}"),
        "accept_length": (a.length, f"τ = {a.tau_method}{window}"),
        "accept_length_stream": (a.length_stream, f"{mx.STREAM_TAU}{window}"),
        "accept_proposed_per_draft": (a.proposed_per_draft, f"ΔT/ΔD: {PROPOSED}{window}"),
        "accept_drafted_share": (a.drafted_share, f"ΔD / Δinter_token_latency_seconds_count: {DRAFTED}"),
        "accept_rate": (a.rate, f"α = ΔA/ΔT (else ā/K){window}"),
    }
    for key, (value, how) in figures.items():
        if value is not None:
            s.measures[key], s.method[key] = value, how
    for i, v in enumerate(a.per_pos):
        s.measures[f"accept_pos_{i}"] = v
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


def group_burst_note(k: int, burst: Sequence[GroupRecord]) -> str:
    """cK groups with burst-read streams: no client-side figure, and how far the engine batched them."""
    text = f"c{k}: {len(burst)} group(s) with burst-read streams: no aggregate, span or overlap from them"
    views = [g.server_window or {} for g in burst]
    shared = median(
        [
            v["request_steps"] / v["engine_steps"]
            for v in views
            if v.get("engine_steps") and v.get("request_steps")
        ]
    )
    if shared is not None:
        text += (
            f"; the engine's /metrics: {shared:.2f} request steps per engine step (median; {k} = the "
            "streams shared every step, 1 = one after the other)"
        )
    return text


def burst_note(burst: Sequence[RequestRecord]) -> str:
    """Why burst-read samples are out of decode, and what the engine's own counters saw for their windows."""
    text = (
        f"decode: {len(burst)} burst-read sample(s) excluded: their tokens reached the client in bursts, and "
        f"{BURST_BLAME} (see the records' flags)"
    )
    seen = [r for r in burst if r.server_ttft_s is not None and r.ttft_s is not None]
    if seen:
        srv = median([r.server_ttft_s for r in seen])
        cli = median([r.ttft_s for r in seen])
        decode = median([(r.server_window or {}).get("decode_s") for r in seen])
        text += (
            f"; the engine's /metrics for those windows: first token after {srv * 1e3:.1f} ms (median; "
            f"the client's TTFT {cli * 1e3:.1f} ms)"
        )
        if decode is not None:
            text += f", decode {decode * 1e3:.1f} ms"
    return text


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
        if name.startswith("prefill_") and "joules_per_token" in win:
            key = f"energy_per_token_{name}"
            s.measures[key] = win["joules_per_token"]
            s.method[key] = (
                f"J per prompt token: {ENERGY} over each clean sample's t_send..t_end, / the samples' "
                f"prompt tokens less cached ones; nodes {', '.join(nodes)}"
            )
    medians = {
        n: v["sm_clock_median_mhz"] for n, v in decode.get("nodes", {}).items() if "sm_clock_median_mhz" in v
    }
    if medians:
        low = min(medians, key=medians.get)
        s.measures["sm_clock_decode_median"] = medians[low]
        s.method["sm_clock_decode_median"] = (
            f"MHz: the lowest node median of nvidia-smi clocks.sm over the decode window's samples ({low})"
        )


def pooled_evidence(windows: Sequence[WindowEvidence]) -> dict[str, dict]:
    """Per window name, pooled over repetitions: see docs/measurement.md, "Per-run evidence"."""
    out: dict[str, dict] = {}
    for name in dict.fromkeys(w.name for w in windows):
        ws = [w for w in windows if w.name == name]
        e: dict = {"sent": sum(w.sent for w in ws), "scrapes": sum(w.scrapes for w in ws)}
        for key, value in ws[0].start.items():
            e[f"{key}_start"] = value
        for key, value in ws[-1].end.items():
            e[f"{key}_end"] = value
        if any(w.start or w.end for w in ws):
            e["busy_scrapes"] = sum(w.busy for w in ws)
        for key, attr in (
            ("finished", "finished"),
            ("prefix_cache_hits", "hits"),
            ("prefix_cache_queries", "queries"),
        ):
            values = [getattr(w, attr) for w in ws]
            if all(v is not None for v in values) and not any(w.resets for w in ws):
                e[key] = sum(values)
        if any(w.resets for w in ws):
            e["counter_resets"] = [
                {"counter": c, "before": b, "after": a} for w in ws for c, b, a in w.resets
            ]
        out[name] = e
    return out


def evidence_flags(windows: Sequence[WindowEvidence]) -> list[dict[str, str]]:
    """One flag per finding and window repetition: {"code", "window", "message"}."""
    many = len({w.rep for w in windows}) > 1
    out = []
    for w in windows:
        where = f"{w.name} (repetition {w.rep + 1})" if many else w.name
        for code, message in window_findings(w):
            out.append({"code": code, "window": w.name, "message": f"{where}: {message}"})
    return out


def window_findings(w: WindowEvidence) -> list[tuple[str, str]]:
    """(code, message) of what one window's evidence shows: docs/measurement.md, "Per-run evidence"."""
    found = []
    if w.resets:
        found.append(
            (
                "counter-reset",
                reset_message(w.resets)
                + ", so its counter-derived figures (acceptance, prefix-cache hits, the "
                "engine's view, the foreign-traffic check) are invalid and its timed requests span two boots",
            )
        )
    if w.finished is not None and w.finished > w.sent_valid:
        found.append(
            (
                "foreign-traffic",
                f"the engine finished {w.finished:g} requests while labkit sent {w.sent_valid}: "
                f"{w.finished - w.sent_valid:g} came from another client (Δ{w.finished_by} summed over labels)",
            )
        )
    if w.live and (w.start.get("running") or w.start.get("waiting")):
        found.append(
            (
                "busy-at-start",
                f"the engine showed {w.start.get('running', 0):g} running and {w.start.get('waiting', 0):g} "
                "waiting requests when the window opened, with none of labkit's in flight: someone else was "
                "using it",
            )
        )
    if w.hits is not None and w.hit_pairs:
        found.append(
            (
                "prefix-cache-hit",
                f"{w.hit_pairs} of its {w.pairs} request windows hit the prefix cache for more than "
                f"{CACHE_HIT_TOLERANCE} tokens per request ({w.hits:g} of {w.queries:g} prompt tokens "
                "cached): its prompts were not new to the engine",
            )
        )
    return found
