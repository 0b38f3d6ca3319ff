"""A RunSummary rendered in the lab note's shape: one row per measure, headline value first.

    decode c1              29.7 t/s (20.0 on the first, cold turn)
    decode c2 (aggregate)  45.6 t/s
    prefill (4,096 prompt) 750 t/s
    acceptance             4.79 of 5 accepted per step (τ 5.79 incl. bonus, α 95.8%)

The third column gives n, the min–max range (en dash, equal decimals) and how the number was obtained, so a
value is never shown without its sample size.
"""

from __future__ import annotations

import re

from labkit.measure.records import RunSummary


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
    if "decode_c1" in m or "decode_c1_cold" in m:
        value = f"{fmt_rate(m.get('decode_c1'))} t/s"
        if m.get("decode_c1_cold") is not None:
            value += f" ({fmt_rate(m['decode_c1_cold'])} on the first, cold turn)"
        out.append(("decode c1", value, _spread(s, "decode_c1")))
    ks = sorted({int(k) for k in re.findall(r"decode_c(\d+)_(?:agg|span)", " ".join(m))})
    for k in ks:
        agg = m.get(f"decode_c{k}_agg")
        detail = _spread(s, f"decode_c{k}_agg")
        if m.get(f"decode_c{k}_overlap") is not None:
            detail += f"{', ' if detail else ''}overlap {m[f'decode_c{k}_overlap']:.2f}"
        if agg is None:
            overlap = m.get(f"decode_c{k}_overlap")
            why = (
                "serialised (no overlap)"
                if overlap is not None and overlap <= 0
                else "no aggregate (no per-chunk token counts, or burst-read streams; see notes)"
            )
            out.append((f"decode c{k} (aggregate)", why, f"span {fmt_rate(m.get(f'decode_c{k}_span'))} t/s"))
        else:
            out.append((f"decode c{k} (aggregate)", f"{fmt_rate(agg)} t/s", detail))
    targets = sorted({int(k) for k in re.findall(r"prefill_(\d+)(?:\s|$)", " ".join(m) + " ")})
    for t in targets:
        detail = _spread(s, f"prefill_{t}")
        ttft = m.get(f"prefill_{t}_ttft")
        if ttft is not None:
            detail += f", TTFT {ttft:.2f} s"
        out.append((f"prefill ({t:,} prompt)", f"{fmt_rate(m[f'prefill_{t}'])} t/s", detail))
    if m.get("accept_per_draft") is not None:
        k = m.get("accept_k")
        k_txt = f"{k:g}" if k is not None else "?"
        if k is not None and abs(k - round(k)) < 1e-9:
            k_txt = str(round(k))
        rate = m.get("accept_rate")
        detail = f"τ {m['accept_length']:.2f} (K={k_txt}, incl. bonus)"
        if rate is not None:
            detail += f", α {rate * 100:.1f}%"
        pos = [
            m[key]
            for key in sorted(
                (x for x in m if x.startswith("accept_pos_")), key=lambda x: int(x.rsplit("_", 1)[1])
            )
        ]
        if pos:
            detail += ", per position " + " ".join(f"{p:.2f}" for p in pos)
        out.append(("acceptance", f"{m['accept_per_draft']:.2f} of {k_txt}", detail))
    if m.get("prefix_cache_hit_ratio") is not None:
        out.append(
            ("prefix-cache hits (prefill)", f"{m['prefix_cache_hit_ratio'] * 100:.1f}%", "unique prompts: ~0")
        )
    if m.get("nfs_read_bytes") is not None:
        from labkit.units import format_size

        out.append(("shared-NFS reads", format_size(m["nfs_read_bytes"]), "Δserverreadbytes, whole run"))
    out.append(("requests", f"{s.n_ok} ok, {s.n_failed} failed", "failed ones are excluded above"))
    return out


def render(s: RunSummary, title: str = "measure") -> str:
    from tabulate import tabulate

    table = tabulate(rows(s), headers=[title, "value", "n, range, notes"], tablefmt="simple")
    notes = "".join(f"\nnote: {n}" for n in s.notes)
    return table + notes
