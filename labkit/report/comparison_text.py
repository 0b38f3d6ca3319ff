"""A Comparison as text (terminal, papermill log), as a DataFrame (notebooks) and its one-line verdicts.

Pure formatting of labkit.report.comparison.Comparison; the numbers are formatted as in the tables. Each
row's interval says its level (95 %, or the 90 % an equivalence verdict rests on) and what it is over (the
sides' units: boots, runs on one boot); the text names the family-wise correction the verdicts used.
docs/compare.md, "Reading a comparison".
"""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from labkit.report.compare import MeasureComparison
from labkit.report.comparison import Comparison, RangeRow, Side
from labkit.report.format import fmt_number

CONTENT_RULE = 'steps per second = decode c1 / τ per run, compared; docs/compare.md, "By prompt content"'


def _num(x: float) -> str:
    """As the tables write rates; small figures (TTFT in seconds, acceptance) with 4 significant digits."""
    return fmt_number(x) if abs(x) >= 10 else f"{x:.4g}"


def _mean(m: float | None, n: int) -> str:
    return "—" if m is None else f"{_num(m)} (n={n})"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.2f} %"


def _interval(r: MeasureComparison) -> str:
    """'95 % [+1.2, +3.4] %', or for an equivalence verdict the 90 % interval TOST rests on."""
    level, lo, hi = (90, r.eq_lo, r.eq_hi) if r.equivalent else (95, r.lo, r.hi)
    if lo is None or hi is None or not r.mean_a:
        return "—"
    return f"{level} % [{lo / abs(r.mean_a) * 100:+.2f}, {hi / abs(r.mean_a) * 100:+.2f}] %"


def over(c: Comparison) -> str:
    """What the intervals are over: 'runs on one boot', 'boots', or each side's unit when they differ."""
    return c.a.unit if c.a.unit == c.b.unit else f"A {c.a.unit}, B {c.b.unit}"


def _p(p: float | None) -> str:
    if p is None:
        return "—"
    return f"{p:.3f}" if p >= 0.001 else (f"{p:.1e}" if p >= 1e-15 else "<1e-15")  # t_cdf's resolution


def rows(c: Comparison) -> list[dict[str, Any]]:
    """One dict per measure: the columns of the text table and the notebook frame."""
    out = []
    for r in c.rows:
        out.append(
            {
                "measure": r.measure,
                "A mean": _mean(r.mean_a, r.n_a),
                "B mean": _mean(r.mean_b, r.n_b),
                "B − A": _pct(r.rel),
                "CI of B − A": _interval(r),
                "over": over(c) if r.lo is not None else "—",
                "test": r.test,
                "p": _p(r.p),
                "p (Holm)": _p(r.p_adj) if r.family > 1 else "—",
                "verdict": r.verdict,
            }
        )
    return out


def _range(x: tuple[float, float] | None) -> str:
    if x is None:
        return "—"
    return _num(x[0]) if x[0] == x[1] else f"{_num(x[0])}–{_num(x[1])}"


def _range_rows(ranges: list[RangeRow]) -> list[dict[str, str]]:
    return [
        {"measure": r.measure, "A range": _range(r.a), "B range": _range(r.b), "reading": r.relation}
        for r in ranges
    ]


def _side(tag: str, s: Side) -> str:
    return f"{tag}: {s.title} — {len(s.docs)} run{'s' if len(s.docs) != 1 else ''} ({s.unit})"


def to_text(c: Comparison) -> str:
    """The whole comparison as plain text: the two sides, the gate, the measure table, recorded ranges."""
    lines = [_side("A", c.a), _side("B", c.b), ""]
    if c.gate.items:
        lines.append(
            "Comparability (differences listed; "
            + ("FORCED past: " + ", ".join(c.gate.blocked) if c.forced else "none blocks")
            + "):"
        )
        lines += [f"  - {i.line()}" for i in c.gate.items]
    else:
        lines.append(
            "Comparability: engine image, engine version, labkit version, plan, prompt set, prompt content and "
            "recipe agree."
        )
    lines.append("")
    if c.rows:
        lines.append(f"B against A ({c.pairing}; equivalence margin ±{c.margin * 100:g} % of A):")
        lines.append(f"Family-wise correction: {c.correction}.")
        lines.append(tabulate(rows(c), headers="keys", tablefmt="github", disable_numparse=True))
        lines += [f"  {r.measure}: {r.verdict} — {r.why}" for r in c.rows]
    if c.content:
        lines.append("")
        lines.append(f"By prompt content, does acceptance explain the decode difference? ({CONTENT_RULE}):")
        lines += [f"  {r.category}: {r.reading} — {r.why}" for r in c.content]
    if c.ranges:
        lines.append("")
        lines.append("Recorded ranges (lab-note figures: min–max only, no run values, so no test):")
        lines.append(
            tabulate(_range_rows(c.ranges), headers="keys", tablefmt="github", disable_numparse=True)
        )
    return "\n".join(lines) + "\n"


def to_frame(c: Comparison) -> Any:
    """The measure table as a pandas DataFrame (notebooks)."""
    import pandas as pd

    return pd.DataFrame(
        rows(c)
        + [
            {"measure": r["measure"], "verdict": r["reading"], "A mean": r["A range"], "B mean": r["B range"]}
            for r in _range_rows(c.ranges)
        ]
    )


class Shown:
    """What a notebook displays: the text in a terminal or papermill log, a table in Jupyter."""

    def __init__(self, c: Comparison):
        self.comparison = c

    def __repr__(self) -> str:
        return to_text(self.comparison)

    def _repr_html_(self) -> str:
        import html

        c = self.comparison
        head = "<br>".join(html.escape(x) for x in (_side("A", c.a), _side("B", c.b)))
        gate = "".join(f"<li>{html.escape(i.line())}</li>" for i in c.gate.items)
        how = f"{c.pairing}; family-wise correction: {c.correction}." if c.rows else ""
        return (
            f"<p>{head}</p><ul>{gate}</ul><p>{html.escape(how)}</p>"
            + str(to_frame(c).to_html(index=False))
            + "".join(
                f"<p>{html.escape(r.measure)}: {html.escape(r.verdict)} — {html.escape(r.why)}</p>"
                for r in c.rows
            )
            + "".join(
                f"<p>{html.escape(r.category)} prompts: {html.escape(r.reading)} — {html.escape(r.why)}</p>"
                for r in c.content
            )
        )
