"""The statistics tables and plots share: one lane's runs of one measure reduced to a Stat, lane titles,
and the statistics over runs (RunStats: n, median, mean, 95 % Student-t interval, CV) with their unit.

Both the tables and the plots read the long-form measures frame (labkit.store.MEASURE_COLUMNS); computing
the median and range in one place keeps a plot's bar and the table's cell the same number. The interval
formulas, the fewer-than-3-runs rule and the units (boots, runs on one boot, runs) are written out in
docs/measurement.md, "Intervals over runs".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from labkit.measure import median
from labkit.measures import prefill_tokens
from labkit.report.format import Stat
from labkit.store import StoredRun


def sim_title(title: str, simulated: bool) -> str:
    """The lane title with "(sim)" added once for a simulated lane."""
    return f"{title} (sim)" if simulated and "(sim)" not in title else title


def lane_parts(measures: Any, sep: str = " ") -> list[tuple[str, Any]]:
    """(display name, rows) per (recipe, variant, source, simulated), so a lane has one name in every figure:
    recorded and measured figures stay apart; `sep` goes between the lane's title and its variant."""
    out: list[tuple[str, Any]] = []
    if not len(measures):
        return out
    for (_recipe, variant, source, sim), part in measures.groupby(
        ["recipe", "variant", "source", "simulated"], sort=True
    ):
        label = str(part.sort_values("run").iloc[-1]["label"])
        name = (
            sim_title(label, bool(sim)) + f"{sep}{variant}" + (" (recorded)" if source == "recorded" else "")
        )
        out.append((name, part))
    return out


def stat(part: Any, measure: str) -> Stat | None:
    """The Stat of `measure` over the rows of one lane, or None when the lane has no row for it."""
    rows = part[part["measure"] == measure]
    if not len(rows):
        return None
    values = [v for v in rows["value"].tolist() if not math.isnan(v)]
    los = [v for v in rows["min"].tolist() if not math.isnan(v)]
    his = [v for v in rows["max"].tolist() if not math.isnan(v)]
    mid = median(values)  # None for no values
    return Stat(
        mid,
        min(los) if los else None,
        max(his) if his else None,
        bool(rows["approx"].any()),
        rows["run"].nunique(),
    )


def prefill_points(measures: Any) -> list[tuple[str, int, Stat]]:
    """(lane title, prompt tokens, Stat) for every prefill_<P> measure: the data of the prefill plot."""
    out: list[tuple[str, int, Stat]] = []
    if not len(measures):
        return out
    # recorded (lab-note) and measured figures of one lane stay apart, as in plots._lanes
    for (recipe, variant, source, simulated), part in measures.groupby(
        ["recipe", "variant", "source", "simulated"], sort=True
    ):
        title = sim_title(str(part.sort_values("run").iloc[-1]["label"]) or recipe, bool(simulated))
        suffix = " (recorded)" if source == "recorded" else ""
        for key in sorted(part["measure"].unique()):
            tokens = prefill_tokens(key)
            if tokens is not None:
                found = stat(part, key)
                if found is not None:
                    out.append((f"{title} [{variant}]{suffix}", tokens, found))
    return out


MIN_INTERVAL_RUNS = 3  # an interval is never computed (or shown) from fewer run values
CONFIDENCE = 0.95


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz method)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 100_000):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with df degrees of freedom: 1 - I_{df/(df+t²)}(df/2, 1/2) / 2 for t >= 0."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_ppf(p: float, df: float) -> float:
    """The p-quantile of Student's t with df > 0 degrees of freedom (t_ppf(0.975, 4) = 2.776), found by
    bisecting t_cdf to 1e-12; beyond df = 1e7 the normal quantile (the two differ by < 1e-7 there)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_ppf needs 0 < p < 1 and df > 0 (got p={p}, df={df})")
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    if df > 1e7:
        return statistics.NormalDist().inv_cdf(p)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    while hi - lo > 1e-12 * max(1.0, hi):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


def finite(values: Sequence[float | None]) -> tuple[list[float], int]:
    """(the finite values, how many ±inf were dropped): NaN and None are missing values and drop silently;
    an infinite run value (a rate over a zero interval) cannot enter a mean, so it drops with a count the
    caller states. docs/measurement.md, "Intervals over runs"."""
    present = [float(v) for v in values if v is not None and not math.isnan(v)]
    kept = [v for v in present if math.isfinite(v)]
    return kept, len(present) - len(kept)


def dropped_note(count: int, side: str = "") -> str:
    """'1 infinite run value dropped' (of A, of B): what finite() left out, for a method or verdict line."""
    where = f" of {side}" if side else ""
    return f"{count} infinite run value{'s' if count != 1 else ''}{where} dropped" if count else ""


def scale_of(values: Sequence[float]) -> float:
    """A power of two near the largest |value| (1.0 for none or all zero): dividing by it is exact, and the
    scaled values lie within ±2, so their squares neither overflow (1e200) nor underflow (1e-160)."""
    top = max((abs(v) for v in values), default=0.0)
    return math.ldexp(1.0, math.frexp(top)[1] - 1) if top else 1.0


def moments(values: Sequence[float], scale: float = 1.0) -> tuple[Fraction, Fraction]:
    """The exact mean and sample variance (divisor n − 1; 0 for one value) of values / scale, as fractions:
    no rounding before the last step, so n copies of one value have that value as mean and zero variance."""
    return exact_moments([Fraction(v / scale) for v in values])


def exact_moments(q: Sequence[Fraction]) -> tuple[Fraction, Fraction]:
    """Mean and sample variance of exact fractions (moments; a paired test's differences)."""
    mean = sum(q, Fraction(0)) / len(q)
    var = sum(((x - mean) ** 2 for x in q), Fraction(0)) / (len(q) - 1) if len(q) > 1 else Fraction(0)
    return mean, var


@dataclass(frozen=True)
class RunStats:
    """One measure over runs: n run values, their median and mean, a 95 % Student-t interval on the mean
    (lo, hi; None below MIN_INTERVAL_RUNS values), CV = s/mean (None below 2 values or for a zero mean),
    `method` saying how the interval was obtained (and which infinite values it left out, `dropped`) and
    `unit` what one value is (boots, runs on one boot, runs). docs/measurement.md, "Intervals over runs"."""

    n: int
    median: float | None
    mean: float | None
    lo: float | None
    hi: float | None
    cv: float | None
    method: str
    unit: str = "runs"
    dropped: int = 0

    @property
    def half_width(self) -> float | None:
        return None if self.lo is None or self.hi is None else (self.hi - self.lo) / 2.0


def run_stats(values: Sequence[float | None], unit: str = "runs") -> RunStats:
    """RunStats of per-run values (one value per run; NaN and None dropped, ±inf dropped and said so in
    `method`): the interval is mean ± t(0.975, n−1)·s/√n with s the sample standard deviation, only for
    n >= 3; mean and s are computed exactly on scaled values (moments)."""
    vals, dropped = finite(values)
    note = f"; {dropped_note(dropped)}" if dropped else ""
    n = len(vals)
    if n == 0:
        return RunStats(0, None, None, None, None, None, "no run values" + note, unit, dropped)
    scale = scale_of(vals)
    exact_mean, var = moments(vals, scale)
    mean = float(exact_mean) * scale
    s = math.sqrt(float(var)) * scale if n >= 2 else None
    cv = s / abs(mean) if s is not None and mean != 0 else None
    if n < MIN_INTERVAL_RUNS:
        method = f"no interval: {n} run value{'s' if n > 1 else ''}, fewer than {MIN_INTERVAL_RUNS}"
        return RunStats(n, median(vals), mean, None, None, cv, method + note, unit, dropped)
    assert s is not None  # n >= MIN_INTERVAL_RUNS >= 2 values have a standard deviation
    half = t_ppf(0.5 + CONFIDENCE / 2.0, n - 1) * s / math.sqrt(n)
    method = f"Student-t on {n} run means, 95 %" + note
    return RunStats(n, median(vals), mean, mean - half, mean + half, cv, method, unit, dropped)


def run_values(part: Any, measure: str) -> list[float]:
    """The per-run values of `measure` in one lane's rows of the measures frame (recorded ranges, which have
    no value, are left out), in run order."""
    rows = part[part["measure"] == measure].sort_values("run")
    return [v for v in rows["value"].tolist() if not math.isnan(v)]


def boot_of(doc: StoredRun) -> str | None:
    """Which boot a stored run ran on, from its run.json: its own run id when it booted its lane (the caller
    said so: provenance.cold_expected), the booting run's id when it ran on a kept lane (boot_run), and None
    when the run does not say (a run against an existing endpoint, a recorded figure)."""
    if doc.boot_run:
        return doc.boot_run
    if doc.provenance.cold_expected is True:
        return doc.run_id
    return None


def unit_of(runs: Sequence[str], boots: Mapping[str, str | None] | None) -> str:
    """What one value of these runs is: "boots" (every run booted its lane), "runs on one boot", "runs on
    k boots", or "runs" when any run does not say which boot it ran on."""
    keys = [(boots or {}).get(r) for r in runs]
    if not keys or any(k is None for k in keys):
        return "runs"
    if keys == list(runs):
        return "boots"
    distinct = len(set(keys))
    return "runs on one boot" if distinct == 1 else f"runs on {distinct} boots"
