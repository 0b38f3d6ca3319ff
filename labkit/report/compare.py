"""Two sets of run values of one measure compared: the difference B − A with its 95 % interval, a test, and a
verdict: faster or slower (better or worse for energy), no detectable difference, or equivalent within a margin.

Pure: numbers in, a MeasureComparison out. Welch's t on independent runs; a paired t when every run of A has
a run of B on the same prompt set; equivalence by two one-sided tests (TOST) against ±margin of A's mean.
Formulas, the verdict order and what "faster" means per measure: docs/compare.md, "Tests and verdicts"; each
measure's direction comes from the catalogue (docs/measurement.md, "The measure catalogue").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TypedDict

from labkit.measures import measure_info
from labkit.report.stats import CONFIDENCE, MIN_INTERVAL_RUNS, t_cdf, t_ppf

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


def direction(measure: str) -> str:
    """ "higher" or "lower": the better side (a larger token rate, a smaller TTFT or energy per token); ""
    when the measure has none (acceptance, overlap, pool sizes) or is not in the catalogue: then the
    verdict says higher or lower."""
    info = measure_info(measure)
    return "" if info is None or info.direction == "none" else info.direction


def verdict_words(measure: str) -> tuple[str, str]:
    """(better, worse) as a verdict says them: faster/slower for rates and times, better/worse otherwise."""
    info = measure_info(measure)
    return (FASTER, SLOWER) if info is not None and info.speed else (BETTER, WORSE)


@dataclass(frozen=True)
class MeasureComparison:
    """One measure, B against A. `diff` = mean(B) − mean(A) (paired: mean of the per-pair differences), `lo`/
    `hi` its 95 % interval, `rel*` the same over mean(A); `test` names the test, `p` its two-sided p-value;
    `tost_p` the larger of the two one-sided p-values against ±margin (equivalent when below ALPHA)."""

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

    @property
    def rel(self) -> float | None:
        return _over(self.diff, self.mean_a)

    @property
    def rel_lo(self) -> float | None:
        return _over(self.lo, self.mean_a)

    @property
    def rel_hi(self) -> float | None:
        return _over(self.hi, self.mean_a)

    def to_dict(self) -> dict:
        return {**asdict(self), "rel": self.rel, "rel_lo": self.rel_lo, "rel_hi": self.rel_hi}


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


def _clean(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and not math.isnan(v)]


def _two_sided(t: float, df: float) -> float:
    return 2.0 * (1.0 - t_cdf(abs(t), df))


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(diff, standard error, Welch–Satterthwaite df) of mean(b) − mean(a) for two independent samples of
    at least 2 values each; df is inf when both variances are zero."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    diff = statistics.fmean(b) - statistics.fmean(a)
    if va + vb == 0.0:
        return diff, 0.0, math.inf
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return diff, se, df


def paired(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """(mean difference, standard error, df = n − 1) of the pairs b[i] − a[i]."""
    d = [y - x for x, y in zip(a, b, strict=True)]
    return statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d)), float(len(d) - 1)


def tost_p(diff: float, se: float, df: float, bound: float) -> float:
    """The TOST p-value for |true difference| < bound: the larger of P(T ≥ (diff + bound)/se) against the
    lower bound and P(T ≤ (diff − bound)/se) against the upper one."""
    if se == 0.0:
        return 0.0 if abs(diff) < bound else 1.0
    lower = 1.0 - t_cdf((diff + bound) / se, df)
    upper = t_cdf((diff - bound) / se, df)
    return max(lower, upper)


def compare_values(
    measure: str,
    a: Sequence[float | None],
    b: Sequence[float | None],
    *,
    pairs: bool = False,
    margin: float = DEFAULT_MARGIN,
) -> MeasureComparison:
    """Compare the run values of one measure. `pairs`: a[i] and b[i] ran the same prompt set (same length
    required), so the paired t is used; otherwise Welch's. Fewer than 3 values on either side: no test."""
    if pairs and len(a) != len(b):
        raise ValueError(f"{measure}: paired values need equal counts ({len(a)} vs {len(b)})")
    if pairs:  # a pair with a missing value drops out whole
        kept = [
            (cx[0], cy[0]) for x, y in zip(a, b, strict=True) if (cx := _clean([x])) and (cy := _clean([y]))
        ]
        xa, xb = [x for x, _ in kept], [y for _, y in kept]
    else:
        xa, xb = _clean(a), _clean(b)
    ma = statistics.fmean(xa) if xa else None
    mb = statistics.fmean(xb) if xb else None
    base = Sides(measure=measure, n_a=len(xa), n_b=len(xb), mean_a=ma, mean_b=mb, margin=margin)
    if ma is None or mb is None:
        return _no_test(base, None, NO_VALUES, "a side has no run value of this measure")
    if min(len(xa), len(xb)) < MIN_INTERVAL_RUNS:
        why = f"{len(xa)} and {len(xb)} run values; a test needs {MIN_INTERVAL_RUNS} on each side"
        return _no_test(base, mb - ma, TOO_FEW, why)
    diff, se, df = paired(xa, xb) if pairs else welch(xa, xb)
    test = f"paired t on {len(xa)} pairs" if pairs else f"Welch t, {len(xa)} vs {len(xb)} runs"
    if se == 0.0:
        lo = hi = diff
        p = 1.0 if diff == 0.0 else 0.0
    else:
        half = t_ppf(1.0 - ALPHA / 2.0, df) * se
        lo, hi, p = diff - half, diff + half, _two_sided(diff / se, df)
    tp = tost_p(diff, se, df, margin * abs(ma)) if ma else None
    verdict, why = _verdict(measure, diff, p, tp, margin)
    return MeasureComparison(
        **base, diff=diff, lo=lo, hi=hi, test=test, df=df, p=p, tost_p=tp, verdict=verdict, why=why
    )


def _no_test(base: Sides, diff: float | None, verdict: str, why: str) -> MeasureComparison:
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
        why=why,
    )


def _verdict(measure: str, diff: float, p: float, tp: float | None, margin: float) -> tuple[str, str]:
    """Significant difference first (p < ALPHA), then equivalence (TOST p < ALPHA), else no detectable one."""
    if p < ALPHA:
        way = direction(measure)
        up = diff > 0
        if not way:
            return (
                "higher" if up else "lower"
            ), f"p = {_g(p)} < {ALPHA:g}; the measure has no speed direction"
        better = up if way == "higher" else not up
        good, bad = verdict_words(measure)
        return (good if better else bad), f"p = {_g(p)} < {ALPHA:g} ({way} is {good})"
    if tp is not None and tp < ALPHA:
        return f"{EQUIVALENT} within ±{margin * 100:g} %", f"TOST p = {_g(tp)} < {ALPHA:g}, p = {_g(p)}"
    return NO_DIFFERENCE, f"p = {_g(p)}; not shown equivalent within ±{margin * 100:g} % (TOST p = {_g(tp)})"


def _g(x: float | None) -> str:
    return "—" if x is None else (f"{x:.2g}" if x >= 1e-15 else "<1e-15")
