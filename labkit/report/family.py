"""The measures of one comparison as one family: Holm's correction across them.

Testing five measures at 5 % each flags at least one of them in about 23 % of comparisons without any real
difference. Holm's step-down adjustment keeps the chance of any false faster/slower verdict in one
comparison below ALPHA, and is never less powerful than Bonferroni. Pure: MeasureComparisons in, the same
rows decided again on their adjusted p out (compare.decide). docs/compare.md, "Many measures at once".
"""

from __future__ import annotations

from collections.abc import Sequence

from labkit.report.compare import ALPHA, MeasureComparison, decide


def holm(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: sorted ascending, the i-th smallest (from 0)
    is multiplied by m − i, capped at 1 and never below the one before it."""
    out = [1.0] * len(ps)
    running = 0.0
    for rank, i in enumerate(sorted(range(len(ps)), key=lambda k: ps[k])):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def corrected(rows: Sequence[MeasureComparison]) -> list[MeasureComparison]:
    """The measures of one comparison as one family: Holm over those with a test (a p), every verdict decided
    again on its adjusted p, so the chance of any false faster/slower in the comparison stays below ALPHA.
    Equivalence stays per measure (its 90 % interval is shown as it is); untested rows are unchanged."""
    tested = [(i, r.p) for i, r in enumerate(rows) if r.p is not None]
    adjusted = holm([p for _, p in tested])
    out = list(rows)
    for (i, _), q in zip(tested, adjusted, strict=True):
        out[i] = decide(rows[i], q, len(tested))
    return out


def correction_text(rows: Sequence[MeasureComparison], levels: int = 0) -> str:
    """What a comparison says about its family-wise correction, for the text form and docs/compare.md;
    `levels`: how many of the tested rows are load levels' figures (load_compare.py), said apart."""
    family = sum(1 for r in rows if r.p is not None)
    what = "measures" if not levels else "figures at load levels" if levels == family else "measures"
    split = f" ({family - levels} measures, {levels} figures at load levels)" if 0 < levels < family else ""
    if family > 1:
        return (
            f"Holm over the {family} tested {what}{split}: a verdict of faster or slower (and the regression gate) "
            f"needs the Holm-adjusted p below {ALPHA:g}, so the chance of any false one in this comparison "
            "stays below 5 %; equivalence is judged per measure, without correction"
        )
    return "none (one tested measure)" if family == 1 else "none (no tested measure)"
