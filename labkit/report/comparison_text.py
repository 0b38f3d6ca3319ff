"""A Comparison as text (terminal, papermill log), as a DataFrame (notebooks) and its one-line verdicts.

Pure formatting of labkit.report.comparison.Comparison; the numbers are formatted as in the tables. Each
row's interval says its level (95 %, or the 90 % an equivalence verdict rests on) and what it is over (the
sides' units: boots, runs on one boot); the text names the family-wise correction the verdicts used.
docs/compare.md, "Reading a comparison".
"""

from __future__ import annotations

from typing import Any

from tabulate import tabulate

from labkit.measures import unit
from labkit.report.compare import NO_VALUES, REGRESSIONS, TOO_FEW, MeasureComparison, verdict_words
from labkit.report.comparison import Comparison, RangeRow, Side
from labkit.report.format import fmt_number
from labkit.report.load_compare import NO_INTERVAL, ONE_FIGURE, RUNS, WITHIN, LoadComparison

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
    line = f"{tag}: {s.title} — {len(s.docs)} run{'s' if len(s.docs) != 1 else ''} ({s.unit})"
    return f"{line}; {s.left_out}" if s.left_out else line


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
    if c.load:
        lines += [""] if lines[-1] else []
        lines += load_lines(c.load, c)
    if c.ranges:
        lines.append("")
        lines.append("Recorded ranges (lab-note figures: min–max only, no run values, so no test):")
        lines.append(
            tabulate(_range_rows(c.ranges), headers="keys", tablefmt="github", disable_numparse=True)
        )
    return "\n".join(lines) + "\n"


# how each way of testing a level's figure is said, once, above the level table
METHODS = {
    RUNS: "several runs of the level per lane, one value per run, Welch t (paired t on shared prompt seeds), as the measures are",
    WITHIN: (
        "each lane has one run of the level; a percentile's 95 % order-statistic interval over the level's requests "
        "gives its standard error (width / 3.92, Price and Bonett) for a z test; attainment by a two-proportion "
        "z test on the level's requests; requests taken as independent"
    ),
}
# why a level's figure has no test, said once for all the rows it holds
UNTESTED = {
    NO_INTERVAL: "a 95 % order-statistic interval of a percentile needs enough requests in the level "
    "(p50 6, p90 36, p95 72, p99 368)",
    "one run each": ONE_FIGURE,
    TOO_FEW: "fewer than 3 runs of the level on a side, and not one run each",
    NO_VALUES: "a side has no value",
}


def _level_value(key: str, x: float | None) -> str:
    """A level's figure as its unit reads best: times in ms, shares in %, rates as the tables write them."""
    if x is None:
        return "—"
    u = unit(key)
    if u == "s":
        return f"{x * 1e3:,.1f} ms"
    if u == "share":
        return f"{x * 100:.1f} %"
    return _num(x)


def level_rows(load: LoadComparison, c: Comparison) -> list[dict[str, Any]]:
    """One dict per level and figure: the columns of the level table."""
    return [
        {
            "level": lr.name.split(" ", 1)[0],
            "figure": lr.name.split(" ", 1)[1],
            "A": _level_value(lr.row.measure, lr.row.mean_a),
            "B": _level_value(lr.row.measure, lr.row.mean_b),
            "B − A": _pct(lr.row.rel),
            "CI of B − A": _interval(lr.row),
            "test": lr.row.test,
            "p": _p(lr.row.p),
            "p (Holm)": _p(lr.row.p_adj) if lr.row.family > 1 and lr.row.p is not None else "—",
            "verdict": lr.row.verdict,
        }
        for lr in load.rows
    ]


def _directed(r: MeasureComparison) -> bool:
    return r.verdict in (*verdict_words(r.measure), *REGRESSIONS, "higher", "lower")


def load_lines(load: LoadComparison, c: Comparison) -> list[str]:
    """The load section: how the levels were tested, the level table, the verdicts with a direction one by one
    and the rest by verdict, the levels left out and why, the capacities."""
    levels = bool(load.rows or load.only or load.flagged)
    lines = ["Under load, level by level (B against A):"] if levels else []
    if not c.rows and load.rows:
        lines.append(f"Family-wise correction: {c.correction}.")
    lines += [f"Tested {m}: {METHODS[m]}{f'; {c.pairing}' if m == RUNS else ''}." for m in load.methods]
    if load.rows:
        lines.append(tabulate(level_rows(load, c), headers="keys", tablefmt="github", disable_numparse=True))
    lines += [f"  {lr.name}: {lr.row.verdict} — {lr.row.why}" for lr in load.rows if _directed(lr.row)]
    grouped: dict[str, list[str]] = {}
    for lr in load.rows:
        if not _directed(lr.row):
            grouped.setdefault(lr.row.verdict, []).append(lr.name)
    for verdict, names in grouped.items():
        why = f" — {UNTESTED[verdict]}" if verdict in UNTESTED else ""
        lines.append(f"  {verdict}: {', '.join(names)}{why}")
    by_why: dict[str, list[str]] = {}
    for n in load.only:
        by_why.setdefault(n.why, []).append(n.label)
    lines += [f"  not compared, {why}: {', '.join(labels)}" for why, labels in by_why.items()]
    lines += [f"  {n.label}: flagged, left out of the verdicts — {n.why}" for n in load.flagged]
    cap = load.capacity
    if cap is not None and (cap.a is not None or cap.b is not None):
        slo = cap.a.slo if cap.a is not None else cap.b.slo if cap.b is not None else ""
        same = cap.a is not None and cap.b is not None and cap.a.slo == cap.b.slo
        lines += [""] if lines else []
        lines.append(f"Capacity under the SLO{f' ({slo})' if same else ''}:")
        for tag, side in (("A", cap.a), ("B", cap.b)):
            shown = "none searched" if side is None else side.text()
            lines.append(f"  {tag}: {shown}{'' if same or side is None else f' under {side.slo}'}")
        lines.append(f"  {cap.verdict} — {cap.why}")
    return lines


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
        runs = c.rows or (c.load is not None and RUNS in c.load.methods)
        how = f"{c.pairing + '; ' if runs else ''}family-wise correction: {c.correction}." if c.tested else ""
        return (
            f"<p>{head}</p><ul>{gate}</ul><p>{html.escape(how)}</p>"
            + (str(to_frame(c).to_html(index=False)) if c.rows or c.ranges else "")
            + "".join(
                f"<p>{html.escape(r.measure)}: {html.escape(r.verdict)} — {html.escape(r.why)}</p>"
                for r in c.rows
            )
            + "".join(
                f"<p>{html.escape(r.category)} prompts: {html.escape(r.reading)} — {html.escape(r.why)}</p>"
                for r in c.content
            )
            + (_load_html(c) if c.load else "")
        )


def _load_html(c: Comparison) -> str:
    """The load section in a notebook: its level table as a table, its other lines as paragraphs."""
    import html

    import pandas as pd

    assert c.load is not None
    lines = load_lines(c.load, c)
    table = pd.DataFrame(level_rows(c.load, c)).to_html(index=False) if c.load.rows else ""
    text = [
        x for x in lines if x and not x.startswith(("|", "Family-wise correction:"))
    ]  # said above the table
    head = f"<p>{html.escape(text[0])}</p>{table}" if table else ""
    return head + "".join(f"<p>{html.escape(x)}</p>" for x in text[1 if table else 0 :])
