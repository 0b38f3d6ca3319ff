"""The speed measures of a run's summary: decode (c1 warm and cold, TTFT, the cK lockstep groups' aggregate,
span and overlap) and prefill per target length, each the median of its clean samples with their range and
the method; the notes on what was excluded and why (docs/measurement.md).

Pure: records in, measures written onto the RunSummary.
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.measure.records import GroupRecord, RequestRecord, RunSummary
from labkit.measure.request.recording import BURST_BLAME, BURST_FLAG
from labkit.measure.request.timing import BURST_GAP_NS, median
from labkit.measures import measure_key, prefill_key

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
# a prefill sample with one of these flags is left out of the medians (a restart: a sample of another boot)
PREFILL_EXCLUDED = ("prefix-cache-hit", "prompt-length-off", "counter-reset")
PREFILL_WINDOW = (
    "prefill: (P - C) / (t_first - t_send - RTT), t_first = first token-bearing chunk (not the role "
    "prelude), P = usage.prompt_tokens; raw = P / TTFT"
)


def put(s: RunSummary, key: str, values: list[float | None], how: str) -> None:
    """One measure: the median of the samples that exist, with the samples, their range and the method."""
    got = [v for v in values if v is not None]
    if not got:
        return
    s.measures[key] = median(got)
    s.samples[key] = got
    s.ranges[key] = [min(got), max(got)]
    s.method[key] = how


def decode_measures(s: RunSummary, ok: list[RequestRecord], groups: Sequence[GroupRecord], src: str) -> None:
    """decode c1 (warm, cold), TTFT (client, engine) and per K the lockstep groups' aggregate, span, overlap;
    burst-read samples and serialised groups noted. `src`: where the output token counts came from."""
    dec_all = [r for r in ok if r.phase == "decode"]
    dec = [r for r in dec_all if BURST_FLAG not in r.flags]
    if len(dec) < len(dec_all):
        s.notes.append(burst_note([r for r in dec_all if BURST_FLAG in r.flags]))
    put(
        s,
        "decode_c1",
        [r.decode_tps for r in dec if r.concurrency == 1 and not r.cold],
        f"median over warm c1 turns; {DECODE_WINDOW}; tokens: {src}; timer: perf_counter_ns",
    )
    put(
        s,
        "decode_c1_cold",
        [r.decode_tps for r in dec if r.cold],
        "the first request after boot (cold turn), same formula as decode_c1",
    )
    # burst-read samples keep their TTFT sample
    put(
        s,
        "ttft_c1",
        [r.ttft_s for r in dec_all if r.concurrency == 1 and not r.cold],
        "median t_first - t_send of warm c1 decode turns, seconds",
    )
    put(
        s,
        "ttft_c1_server",
        [r.server_ttft_s for r in dec_all if r.concurrency == 1 and not r.cold],
        f"median of the engine's own TTFT over the same turns: {SERVER_TTFT}",
    )
    for k in sorted({g.concurrency for g in groups}):
        gs = [g for g in groups if g.concurrency == k and g.ok]
        put(
            s,
            measure_key("decode_c<N>_agg", concurrency=k),
            [g.agg_tps for g in gs if not g.serialised and not g.burst_streams],
            f"median over lockstep groups of {k}; {AGG_WINDOW}; tokens: {src}",
        )
        put(
            s,
            measure_key("decode_c<N>_span", concurrency=k),
            [g.span_tps for g in gs if not g.burst_streams],
            f"span estimator, {k} streams",
        )
        put(
            s,
            measure_key("decode_c<N>_overlap", concurrency=k),
            [g.overlap for g in gs if not g.burst_streams],
            "|steady window| / span (groups with burst-read streams excluded)",
        )
        if any(g.serialised for g in gs):
            s.notes.append(f"c{k}: {sum(g.serialised for g in gs)} group(s) ran serialised (no overlap)")
        burst = [g for g in gs if g.burst_streams]
        if burst:
            s.notes.append(group_burst_note(k, burst))


def prefill_measures(
    s: RunSummary, ok: list[RequestRecord], targets: Sequence[int], rtt_ns: int, counter_kind: str
) -> None:
    """Per target length: prefill t/s (RTT-corrected and raw) and TTFT over the clean samples."""
    pre = [r for r in ok if r.phase == "prefill"]
    for target in targets:
        rows = [r for r in pre if r.prompt_target == target]
        clean = [r for r in rows if not any(f in r.flags for f in PREFILL_EXCLUDED)]
        if len(clean) < len(rows):
            s.notes.append(f"{prefill_key(target)}: {len(rows) - len(clean)} flagged sample(s) excluded")
        put(
            s,
            prefill_key(target),
            [r.prefill_tps for r in clean],
            f"median; {PREFILL_WINDOW}; RTT {rtt_ns / 1e6:.2f} ms; prompt length via {counter_kind}",
        )
        put(s, prefill_key(target, "raw"), [r.prefill_tps_raw for r in clean], "P / TTFT, no RTT correction")
        put(s, prefill_key(target, "ttft"), [r.ttft_s for r in clean], "median TTFT, seconds")


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
        assert srv is not None and cli is not None  # medians of a non-empty list of numbers
        text += (
            f"; the engine's /metrics for those windows: first token after {srv * 1e3:.1f} ms (median; "
            f"the client's TTFT {cli * 1e3:.1f} ms)"
        )
        if decode is not None:
            text += f", decode {decode * 1e3:.1f} ms"
    return text
