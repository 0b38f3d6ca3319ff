"""Two sets of run values of one measure compared: the difference B − A with its 95 % interval, a test, and a
verdict: faster or slower (better or worse for energy), no detectable difference, or equivalent within a margin.

Pure: numbers in, a MeasureComparison out. Welch's t on independent runs; a paired t when every run of A has
a run of B on the same prompt set; equivalence by two one-sided tests (TOST) against ±margin of A's mean,
shown with the 90 % interval it rests on. Means and variances are exact (fractions of values scaled by a
power of two), so constant sides are judged exactly and extreme magnitudes neither overflow nor underflow;
infinite run values are dropped and said so. The measures of one comparison are one family: `corrected`
applies Holm's correction and decides every verdict on the adjusted p. Formulas, the verdict order, the
correction and what "faster" means per measure: docs/compare.md, "Tests and verdicts" and "Many measures at
once"; each measure's direction comes from the catalogue (docs/measurement.md, "The measure catalogue").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from typing import Any, TypedDict

from labkit.measures import direction, measure_info
from labkit.report.stats import (
    CONFIDENCE,
    MIN_INTERVAL_RUNS,
    dropped_note,
    exact_moments,
    finite,
    moments,
    scale_of,
    t_cdf,
    t_ppf,
)

ALPHA = 1.0 - CONFIDENCE
DEFAULT_MARGIN = 0.02  # TOST equivalence margin, relative to A's mean
FASTER, SLOWER, NO_DIFFERENCE, EQUIVALENT, TOO_FEW, NO_VALUES = (
    "faster",
    "slower",
    "no detectable difference",
    "equivalent",
    "too few runs",
    "no run values",
)
BETTER, WORSE = "better", "worse"  # the verdicts of a measure with a direction that is no speed (energy)
REGRESSIONS = (SLOWER, WORSE)  # the verdicts --fail-on-regression counts


def verdict_words(measure: str) -> tuple[str, str]:
    """(better, worse) as a verdict says them: faster/slower for rates and times, better/worse otherwise."""
    info = measure_info(measure)
    return (FASTER, SLOWER) if info is not None and info.speed else (BETTER, WORSE)


@dataclass(frozen=True)
class MeasureComparison:
    """One measure, B against A. `diff` = mean(B) − mean(A) (paired: mean of the per-pair differences), `lo`/
    `hi` its 95 % interval, `rel*` the same over mean(A); `test` names the test, `p` its two-sided p-value;
    `tost_p` the larger of the two one-sided p-values against ±margin (equivalent when below ALPHA), `eq_lo`/
    `eq_hi` the 90 % interval that TOST verdict rests on (inside ±margin exactly when tost_p < ALPHA);
    `p_adj` the p the verdict was decided on: Holm-adjusted over the `family` measures tested together (p
    itself for a family of one); `note` what was left out (infinite run values)."""

    measure: str
    n_a: int
    n_b: int
    mean_a: float | None
    mean_b: float | None
    diff: float | None
    lo: float | None
    hi: float | None
    test: str
    df: float | None
    p: float | None
    margin: float
    tost_p: float | None
    verdict: str
    why: str
    eq_lo: float | None = None
    eq_hi: float | None = None
    p_adj: float | None = None
    family: int = 1
    note: str = ""

    @property
    def rel(self) -> float | None:
        return _over(self.diff, self.mean_a)

    @property
    def rel_lo(self) -> float | None:
        return _over(self.lo, self.mean_a)

    @property
    def rel_hi(self) -> float | None:
        return _over(self.hi, self.mean_a)

    @property
    def equivalent(self) -> bool:
        return self.verdict.startswith(EQUIVALENT)

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "rel": self.rel,
            "rel_lo": self.rel_lo,
            "rel_hi": self.rel_hi,
            "rel_eq_lo": _over(self.eq_lo, self.mean_a),
            "rel_eq_hi": _over(self.eq_hi, self.mean_a),
        }


def _over(x: float | None, base: float | None) -> float | None:
    return None if x is None or not base else x / abs(base)


class Sides(TypedDict):
    """What a comparison states about its two sides before any test."""

    measure: str
    n_a: int
    n_b: int
    mean_a: float | None
    mean_b: float | None
    margin: float
    note: str


def _infinite(values: Sequence[float | None]) -> int:
    return sum(1 for v in values if v is not None and math.isinf(v))


def _two_sided(t: float, df: float) -> float:
    return 2.0 * (1.0 - t_cdf(abs(t), df))


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(diff, standard error, Welch–Satterthwaite df) of mean(b) − mean(a) for two independent samples of
    at least 2 values each, computed exactly on the values scaled by one power of two (stats.moments): n
    copies of one value have that mean and zero spread whatever n, and 1e200 or 1e-160 neither overflow nor
    underflow when squared. df is inf when both variances are zero (both sides constant)."""
    scale = scale_of([*a, *b])
    ma, va = moments(a, scale)
    mb, vb = moments(b, scale)
    wa, wb = va / len(a), vb / len(b)
    diff = float(mb - ma) * scale
    if wa + wb == 0:
        return diff, 0.0, math.inf
    df = float((wa + wb) ** 2 / (wa**2 / (len(a) - 1) + wb**2 / (len(b) - 1)))
    return diff, math.sqrt(float(wa + wb)) * scale, df


def paired(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(mean difference, standard error, df = n − 1) of the pairs b[i] − a[i], the differences exact (scaled
    as in welch): identical differences give standard error 0."""
    scale = scale_of([*a, *b])
    d = [Fraction(y / scale) - Fraction(x / scale) for x, y in zip(a, b, strict=True)]
    mean, var = exact_moments(d)
    return float(mean) * scale, math.sqrt(float(var / len(d))) * scale, float(len(d) - 1)


def tost_p(diff: float, se: float, df: float, bound: float) -> float:
    """The TOST p-value for |true difference| < bound: the larger of P(T ≥ (diff + bound)/se) against the
    lower bound and P(T ≤ (diff − bound)/se) against the upper one."""
    if se == 0.0:
        return 0.0 if abs(diff) < bound else 1.0
    lower = 1.0 - t_cdf((diff + bound) / se, df)
    upper = t_cdf((diff - bound) / se, df)
    return max(lower, upper)


def _kept(
    a: Sequence[float | None], b: Sequence[float | None], pairs: bool
) -> tuple[list[float], list[float], str]:
    """The values each side keeps (a pair with a missing or infinite value drops out whole) and a note
    naming the infinite values left out."""
    if pairs:
        both = [(finite([x])[0], finite([y])[0]) for x, y in zip(a, b, strict=True)]
        kept = [(x[0], y[0]) for x, y in both if x and y]
        xa, xb = [x for x, _ in kept], [y for _, y in kept]
    else:
        xa, xb = finite(a)[0], finite(b)[0]
    note = "; ".join(x for x in (dropped_note(_infinite(a), "A"), dropped_note(_infinite(b), "B")) if x)
    if note and pairs:
        note += " (each with its pair)"
    return xa, xb, note


def compare_values(
    measure: str,
    a: Sequence[float | None],
    b: Sequence[float | None],
    *,
    pairs: bool = False,
    margin: float = DEFAULT_MARGIN,
) -> MeasureComparison:
    """Compare the run values of one measure. `pairs`: a[i] and b[i] ran the same prompt set (same length
    required), so the paired t is used; otherwise Welch's. Fewer than 3 values on either side: no test.
    NaN and None are missing values; ±inf are dropped and named in `note`. A family of one: `corrected`
    decides the verdicts of several measures together."""
    if pairs and len(a) != len(b):
        raise ValueError(f"{measure}: paired values need equal counts ({len(a)} vs {len(b)})")
    xa, xb, note = _kept(a, b, pairs)
    ma = statistics.mean(xa) if xa else None  # exact, then rounded once: n copies of x have mean x
    mb = statistics.mean(xb) if xb else None
    base = Sides(measure=measure, n_a=len(xa), n_b=len(xb), mean_a=ma, mean_b=mb, margin=margin, note=note)
    if ma is None or mb is None:
        return no_test(base, None, NO_VALUES, "a side has no run value of this measure")
    if min(len(xa), len(xb)) < MIN_INTERVAL_RUNS:
        why = f"{len(xa)} and {len(xb)} run values; a test needs {MIN_INTERVAL_RUNS} on each side"
        return no_test(base, mb - ma, TOO_FEW, why)
    diff, se, df = paired(xa, xb) if pairs else welch(xa, xb)
    test = f"paired t on {len(xa)} pairs" if pairs else f"Welch t, {len(xa)} vs {len(xb)} runs"
    if se == 0.0:  # both sides constant (or constant differences): the difference is exact
        lo = hi = eq_lo = eq_hi = diff
        p = 1.0 if diff == 0.0 else 0.0
    else:
        half, eq_half = t_ppf(1.0 - ALPHA / 2.0, df) * se, t_ppf(1.0 - ALPHA, df) * se
        lo, hi, eq_lo, eq_hi = diff - half, diff + half, diff - eq_half, diff + eq_half
        p = _two_sided(diff / se, df)
    tp = tost_p(diff, se, df, margin * abs(ma)) if ma else None
    row = MeasureComparison(
        **base,
        diff=diff,
        lo=lo,
        hi=hi,
        eq_lo=eq_lo,
        eq_hi=eq_hi,
        test=test,
        df=df,
        p=p,
        tost_p=tp,
        verdict="",
        why="",
    )
    return decide(row, p, 1)


def no_test(base: Sides, diff: float | None, verdict: str, why: str) -> MeasureComparison:
    """A comparison that cannot be tested: the means and the raw difference only."""
    return MeasureComparison(
        **base,
        diff=diff,
        lo=None,
        hi=None,
        test="none",
        df=None,
        p=None,
        tost_p=None,
        verdict=verdict,
        why=why + (f"; {base['note']}" if base["note"] else ""),
    )


def decide(r: MeasureComparison, p_adj: float, family: int) -> MeasureComparison:
    """The row with its verdict decided on `p_adj` (the p itself, or Holm-adjusted over `family` measures):
    a significant difference first (p_adj < ALPHA), then equivalence (TOST p < ALPHA), else no detectable
    difference."""
    assert r.p is not None and r.diff is not None  # only tested rows are decided
    significant = p_adj < ALPHA
    held = _held(r.p, p_adj, family, significant)
    width = f"±{r.margin * 100:g} %"
    if significant:
        way = direction(r.measure)  # the catalogue's Direction
        if way == "none":  # acceptance, pool sizes, a measure it does not know: said higher or lower
            verdict, why = (
                ("higher" if r.diff > 0 else "lower"),
                f"{held}; the measure has no speed direction",
            )
        else:
            good, bad = verdict_words(r.measure)
            verdict = good if (r.diff > 0) == (way == "higher") else bad
            why = f"{held} ({way} is {good})"
    elif r.tost_p is not None and r.tost_p < ALPHA:
        verdict = f"{EQUIVALENT} within {width}"
        why = f"TOST p {_g(r.tost_p)} < {ALPHA:g}: the 90 % interval {_span(r)} lies within {width}; {held}"
    else:
        verdict = NO_DIFFERENCE
        lost = "; the 95 % interval excludes 0, but not after the correction" if r.p < ALPHA else ""
        why = f"{held}{lost}; not shown equivalent within {width} (TOST p {_g(r.tost_p)})"
    why += f"; {r.note}" if r.note else ""
    return replace(r, p_adj=p_adj, family=family, verdict=verdict, why=why)


def _held(p: float, p_adj: float, family: int, significant: bool) -> str:
    """'p = 0.012 < 0.05', or in a family 'p = 0.012, Holm-adjusted over 4 measures p = 0.048 < 0.05'."""
    test = f"{'<' if significant else '≥'} {ALPHA:g}"
    if family == 1:
        return f"p {_g(p)} {test}"
    return f"p {_g(p)}, Holm-adjusted over {family} measures p {_g(p_adj)} {test}"


def _span(r: MeasureComparison) -> str:
    """The 90 % interval as the verdict line says it: relative to A's mean."""
    lo, hi = _over(r.eq_lo, r.mean_a), _over(r.eq_hi, r.mean_a)
    return "—" if lo is None or hi is None else f"[{lo * 100:+.2f}, {hi * 100:+.2f}] %"


def _g(x: float | None) -> str:
    """'= 0.031', '< 1e-15' (t_cdf's resolution) or '= —': a p-value after its name."""
    return "= —" if x is None else (f"= {x:.2g}" if x >= 1e-15 else "< 1e-15")
