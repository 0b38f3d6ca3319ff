"""Every number in a table formatted once, as a finished string (pure).

Formatting rules (docs/measurement.md, "Run statistics and table formatting"): median, min–max across runs with an en dash (U+2013), both ends
with the same decimals, collapsed to one value when equal; "~" for approximate figures; "(x cold)" for
the cold turn; "—" where a lane has no figure; "(sim)" on simulated lanes (stats.sim_title). Interval
forms ("49.1 ± 1.2", "49.1 [47.9, 50.3]", and "n=2" where there are too few runs for one):
docs/measurement.md, "Intervals over runs".
"""

from __future__ import annotations

from dataclasses import dataclass

EN_DASH = "\u2013"
PLUS_MINUS = "\u00b1"
EM_DASH = "\u2014"  # "not measured"
MISSING = EM_DASH


@dataclass(frozen=True)
class Stat:
    """One measure of one lane across its runs: median of run values, min/max over run values and recorded
    ranges, whether any figure was approximate, and how many runs contributed."""

    median: float | None
    lo: float | None
    hi: float | None
    approx: bool = False
    n: int = 0

    @property
    def empty(self) -> bool:
        return self.median is None and self.lo is None


def fmt_number(x: float, decimals: int = 1, thousands: bool = True) -> str:
    return f"{x:,.{decimals}f}" if thousands else f"{x:.{decimals}f}"


def fmt_range(lo: float, hi: float, decimals: int = 1, thousands: bool = True) -> str:
    """'47.8–50.7'; one value when both ends format the same."""
    a, b = fmt_number(lo, decimals, thousands), fmt_number(hi, decimals, thousands)
    return a if a == b else f"{a}{EN_DASH}{b}"


def fmt_stat(stat: Stat | None, decimals: int = 1, thousands: bool = True) -> str:
    """'49.1 (47.8–50.7)', '29.7', '47.8–50.7' (a range without a median), '~750', or '—'."""
    if stat is None or stat.empty:
        return MISSING
    rng = (
        fmt_range(stat.lo, stat.hi, decimals, thousands)
        if stat.lo is not None and stat.hi is not None
        else ""
    )
    if stat.median is None:
        text = rng
    else:
        med = fmt_number(stat.median, decimals, thousands)
        text = med if rng in ("", med) else f"{med} ({rng})"
    return ("~" + text) if stat.approx else text


def fmt_interval(
    mean: float,
    lo: float,
    hi: float,
    form: str,
    decimals: int = 1,
    thousands: bool = True,
    approx: bool = False,
) -> str:
    """'49.1 ± 1.2' (form "pm": mean ± half the interval) or '49.1 [47.9, 50.3]' (form "ci")."""
    m = fmt_number(mean, decimals, thousands)
    if form == "pm":
        text = f"{m} {PLUS_MINUS} {fmt_number((hi - lo) / 2, decimals, thousands)}"
    else:
        text = f"{m} [{fmt_number(lo, decimals, thousands)}, {fmt_number(hi, decimals, thousands)}]"
    return ("~" + text) if approx else text


def fmt_few(stat: Stat | None, decimals: int = 1, thousands: bool = True) -> str:
    """'49.1 (47.8–50.7) n=2': the range form with its run count, where an interval row has too few runs."""
    text = fmt_stat(stat, decimals, thousands)
    return text if stat is None or stat.empty else f"{text} n={stat.n}"


def fmt_with_cold(main: Stat | None, cold: Stat | None, decimals: int = 1, thousands: bool = True) -> str:
    """'52.9 (25.5 cold)': the cold turn beside the warm figure (its own range if runs differ)."""
    return with_cold(fmt_stat(main, decimals, thousands), cold, decimals, thousands)


def with_cold(text: str, cold: Stat | None, decimals: int = 1, thousands: bool = True) -> str:
    """A finished cell with the cold turn added as '(25.5 cold)', or unchanged without a cold figure."""
    if cold is None or cold.empty:
        return text
    if cold.median is not None and cold.lo is not None:
        cold = Stat(None, cold.lo, cold.hi, cold.approx, cold.n)  # one bracket: show the cold range only
    return f"{text} ({fmt_stat(cold, decimals, thousands)} cold)"


def fmt_acceptance(accepted: Stat | None, k: Stat | None, decimals: int = 2) -> str:
    """'4.79 of 5': accepted drafts per step of K (bonus excluded). K is the configured integer; a K that is
    not a whole number (older runs inferred it as proposed per draft) is not K, so only '4.79' is shown."""
    if accepted is None or accepted.empty:
        return MISSING
    text = fmt_stat(accepted, decimals, thousands=False)
    if k is None or k.empty or k.median is None or not float(k.median).is_integer():
        return text
    return f"{text} of {int(k.median)}"


def _per_million(stat: Stat) -> Stat:
    """The stat in millions (tokens, MB = 10^6 bytes)."""

    def div(v: float | None) -> float | None:
        return None if v is None else v / 1e6

    return Stat(div(stat.median), div(stat.lo), div(stat.hi), stat.approx, stat.n)


def fmt_kv(tokens: Stat | None, context: Stat | None) -> str:
    """'8.73M tokens @131072'; '8.73M tokens (8.70–8.75M)' across differing runs; context omitted when the
    source did not state it."""
    if tokens is None or tokens.empty:
        return MISSING
    scaled = _per_million(tokens)
    text = fmt_stat(scaled, 2, False)
    head, sep, tail = text.partition(" (")
    text = f"{head}M tokens{sep}{tail[:-1]}M)" if sep else f"{text}M tokens"
    if context is not None and not context.empty and context.median is not None:
        text += f" @{int(context.median)}"
    return text


def fmt_nfs(stat: Stat | None, per: str = "completion") -> str:
    """'+258 MB per short completion', '0 MB' (MB = 10^6 bytes)."""
    if stat is None or stat.empty:
        return MISSING
    scaled = _per_million(stat)
    text = fmt_stat(scaled, 0)
    if (scaled.median if scaled.median is not None else scaled.hi) == 0:
        return f"{text} MB"
    sign = "~+" if text.startswith("~") else "+"
    return f"{sign}{text.lstrip('~')} MB" + (f" per {per}" if per else "")
