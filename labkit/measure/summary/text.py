"""A RunSummary rendered in the lab note's shape: one row per measure, headline value first.

    decode c1              29.7 t/s (20.0 on the first, cold turn)
    decode c2 (aggregate)  45.6 t/s
    prefill (4,096 prompt) 750 t/s
    acceptance             4.79 of 5   accepted per drafting step (ā, bonus excluded); τ 5.61 tokens per
                                       engine step (engine counters, incl. bonus); α 95.8%

The third column gives n, the min–max range (en dash, equal decimals) and how the number was obtained, so a
value is never shown without its sample size. Titles and units are the catalogue's (docs/measurement.md,
"The measure catalogue"), the cK and prefill rows in the lab note's wording.
"""

from __future__ import annotations

from typing import Any

from labkit.measure.records import RunSummary
from labkit.measure.summary.load import load_rows
from labkit.measures import (
    CONTENT,
    RATE,
    axis_values,
    content_key,
    measure_key,
    prefill_key,
    title,
)


def fmt_rate(value: float | None) -> str:
    """29.7, 605, 3,957: one decimal below 100 t/s, whole numbers with thousands separators above."""
    if value is None:
        return "—"
    return f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def fmt_range(lo: float, hi: float) -> str:
    """'47.8–50.7' with the decimals of the coarser end on both; one value when they are equal."""
    a, b = fmt_rate(lo), fmt_rate(hi)
    if "." in a or "." in b:
        a, b = f"{lo:.1f}", f"{hi:.1f}"
    return a if a == b else f"{a}\u2013{b}"


def _spread(s: RunSummary, key: str) -> str:
    n = len(s.samples.get(key, []))
    lo_hi = s.ranges.get(key)
    if not n:
        return ""
    return f"n={n}" + (f", {fmt_range(*lo_hi)}" if lo_hi and n > 1 else "")


def rows(s: RunSummary) -> list[tuple[str, str, str]]:
    """(measure, value, detail) rows in the lab note's order."""
    m = s.measures
    out: list[tuple[str, str, str]] = []
    if "decode_c1" in m or "decode_c1_cold" in m or "ttft_c1" in m:
        value = f"{fmt_rate(m.get('decode_c1'))} {RATE}" if "decode_c1" in m else "— (see notes)"
        if m.get("decode_c1_cold") is not None:
            value += f" ({fmt_rate(m['decode_c1_cold'])} on the first, cold turn)"
        detail = _spread(s, "decode_c1")
        ttft_c1, ttft_server = m.get("ttft_c1"), m.get("ttft_c1_server")
        if ttft_c1 is not None:
            detail += f"{', ' if detail else ''}TTFT {ttft_c1 * 1e3:.1f} ms"
            if ttft_server is not None:
                detail += f" (engine's own: {ttft_server * 1e3:.1f} ms)"
        out.append((title("decode_c1"), value, detail))
    for k in axis_values(m, ("decode_c<N>_agg", "decode_c<N>_span"), "concurrency"):
        agg = m.get(measure_key("decode_c<N>_agg", concurrency=k))
        detail = _spread(s, measure_key("decode_c<N>_agg", concurrency=k))
        overlap = m.get(measure_key("decode_c<N>_overlap", concurrency=k))
        if overlap is not None:
            detail += f"{', ' if detail else ''}overlap {overlap:.2f}"
        if agg is None:
            why = (
                "serialised (no overlap)"
                if overlap is not None and overlap <= 0
                else "no aggregate (no per-chunk token counts, or burst-read streams; see notes)"
            )
            out.append(
                (
                    f"decode c{k} (aggregate)",
                    why,
                    f"span {fmt_rate(m.get(measure_key('decode_c<N>_span', concurrency=k)))} {RATE}",
                )
            )
        else:
            out.append((f"decode c{k} (aggregate)", f"{fmt_rate(agg)} {RATE}", detail))
        conc_key = measure_key("decode_c<N>_concurrency", concurrency=k)
        conc = m.get(conc_key)
        if conc is not None:
            source = "engine steps" if "engine steps" in s.method.get(conc_key, "") else "client"
            out[-1] = (*out[-1][:2], out[-1][2] + f", effective concurrency {conc:.2f} ({source})")
    for t in axis_values(m, "prefill_<P>", "prompt"):
        detail = _spread(s, prefill_key(int(t)))
        ttft = m.get(prefill_key(int(t), "ttft"))
        if ttft is not None:
            detail += f", TTFT {ttft:.2f} s"
        out.append((f"prefill ({t:,} prompt)", f"{fmt_rate(m[prefill_key(int(t))])} {RATE}", detail))
    if m.get("accept_per_draft") is not None:
        out.append(acceptance_row(s))
    truth = server_truth_row(s)
    if truth is not None:
        out.append(truth)
    out += content_rows(s)
    out += load_rows(s)
    hit_ratio = m.get("prefix_cache_hit_ratio")
    if hit_ratio is not None:
        out.append(
            (
                title("prefix_cache_hit_ratio"),
                f"{hit_ratio * 100:.1f}%",
                "unique prompts: ~0",
            )
        )
    nfs_read = m.get("nfs_read_bytes")
    if nfs_read is not None:
        from labkit.units import format_size

        out.append((title("nfs_read_bytes"), format_size(nfs_read), "Δserverreadbytes, whole run"))
    out.append(("requests", f"{s.n_ok} ok, {s.n_failed} failed", "failed ones are excluded above"))
    return out


def k_text(k: float | None) -> str | None:
    """K as an integer; None when unknown or not a whole number (a legacy figure inferred from counters)."""
    if k is None or abs(k - round(k)) > 1e-9:
        return None
    return str(round(k))


def acceptance_row(s: RunSummary) -> tuple[str, str, str]:
    """'2.78 of 4', then τ per engine step (and per SSE chunk), proposed per draft, the drafted share, α,
    per-position rates and where K came from (docs/measurement.md, "Speculative acceptance conventions")."""
    m = s.measures
    k = k_text(m.get("accept_k"))
    value = f"{m['accept_per_draft']:.2f}" + (f" of {k}" if k else "")
    parts = ["accepted per drafting step (ā, bonus excluded)"]
    tau, stream = m.get("accept_length"), m.get("accept_length_stream")
    if tau is not None:
        how = "SSE chunks" if "SSE chunk" in s.method.get("accept_length", "") else "engine counters"
        parts.append(f"τ {tau:.2f} tokens per engine step ({how}, incl. bonus)")
        if stream is not None and how != "SSE chunks":
            parts[-1] += f", {stream:.2f} per SSE chunk"
    proposed, share = m.get("accept_proposed_per_draft"), m.get("accept_drafted_share")
    if proposed is not None:
        parts.append(f"{proposed:.2f} proposed per draft")
    if share is not None:
        parts.append(f"drafts in {share * 100:.0f}% of decode steps")
    rate = m.get("accept_rate")
    if rate is not None:
        parts.append(f"α {rate * 100:.1f}%")
    pos = [m[measure_key("accept_pos_<i>", position=i)] for i in axis_values(m, "accept_pos_<i>", "position")]
    if pos:
        parts.append("per position " + " ".join(f"{p:.2f}" for p in pos))
    if k and s.method.get("accept_k"):
        parts.append(s.method["accept_k"])
    return "acceptance", value, "; ".join(parts)


def _concurrencies(m: dict[str, Any], measure: str) -> list[int]:
    return [int(k) for k in axis_values(m, f"decode_c<N>_{measure}", "concurrency")]


def server_truth_row(s: RunSummary) -> tuple[str, str, str] | None:
    """Client − engine agreement per request, per concurrency: TTFT (ms) and decode (%), medians with their
    range, the engine's own decode rate, and per-request acceptance where the responses carried it
    (docs/measurement.md, "Per-request server truth")."""
    m = s.measures
    ks = sorted(set(_concurrencies(m, "engine_gap")) | set(_concurrencies(m, "ttft_engine_gap")))
    if not ks:
        return None
    parts = []
    for k in ks:
        bits = []
        ttft_key, dec_key = (
            measure_key(f"decode_c<N>_{x}", concurrency=k) for x in ("ttft_engine_gap", "engine_gap")
        )
        ttft, dec = m.get(ttft_key), m.get(dec_key)
        if ttft is not None:
            lo, hi = s.ranges.get(ttft_key, [ttft, ttft])
            bits.append(f"TTFT {ttft * 1e3:+.1f} ms ({lo * 1e3:+.1f} to {hi * 1e3:+.1f})")
        if dec is not None:
            lo, hi = s.ranges.get(dec_key, [dec, dec])
            bits.append(f"decode {dec * 100:+.1f}% ({lo * 100:+.1f} to {hi * 100:+.1f})")
        n = max(len(s.samples.get(x, [])) for x in (dec_key, ttft_key))
        engine = m.get(measure_key("decode_c<N>_engine", concurrency=k))
        if engine is not None:
            bits.append(f"engine decode {fmt_rate(engine)} {RATE}")
        apd, tau = (
            m.get(measure_key(f"decode_c<N>_{x}", concurrency=k))
            for x in ("accept_per_draft", "accept_length")
        )
        if apd is not None:
            bits.append(f"ā {apd:.2f}" + (f", τ {tau:.2f}" if tau is not None else "") + " from the requests")
        parts.append(f"c{k} (n={n}): " + ", ".join(bits))
    return "server truth", "client − engine per request", "; ".join(parts) + " (medians, min to max)"


def content_rows(s: RunSummary) -> list[tuple[str, str, str]]:
    """One row per prompt content category measured: its decode c1, then n, range, TTFT and its acceptance
    (τ, ā of K, α) from its own windows (docs/measurement.md, "Prompt content")."""
    m, out = s.measures, []
    k = k_text(m.get("accept_k"))
    for category in CONTENT:
        key = content_key("decode_c1", category)
        if key not in m:
            continue
        parts = [_spread(s, key)]
        ttft, tau = m.get(content_key("ttft_c1", category)), m.get(content_key("accept_length", category))
        ahat, rate = (
            m.get(content_key("accept_per_draft", category)),
            m.get(content_key("accept_rate", category)),
        )
        if ttft is not None:
            parts.append(f"TTFT {ttft * 1e3:.1f} ms")
        if tau is not None:
            parts.append(f"τ {tau:.2f}")
        if ahat is not None:
            parts.append(f"ā {ahat:.2f}" + (f" of {k}" if k else ""))
        if rate is not None:
            parts.append(f"α {rate * 100:.1f}%")
        out.append((title(key), f"{fmt_rate(m[key])} {RATE}", ", ".join(p for p in parts if p)))
    return out


def render(s: RunSummary, title: str = "measure") -> str:
    from tabulate import tabulate

    table = tabulate(rows(s), headers=[title, "value", "n, range, notes"], tablefmt="simple")
    notes = "".join(f"\nnote: {n}" for n in s.notes)
    return table + notes
