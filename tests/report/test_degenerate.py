"""Statistics on degenerate data: constant and near-constant sides, infinite run values, extreme magnitudes,
the interval an equivalence verdict rests on, and Holm's correction across measures. Reference values come
from scipy (run once in a throwaway venv, written here: scipy is not a dependency) or, where scipy's own
floating point gives way, from the exact arithmetic written out beside them."""

from __future__ import annotations

import math

import pytest

from labkit import report as rp
from labkit.report.compare import EQUIVALENT, FASTER, NO_DIFFERENCE, SLOWER, compare_values

A = [50.1, 49.8, 50.3, 49.9, 50.0]
B = [51.6, 51.4, 51.9, 51.5, 51.7]
INF = math.inf

# --- constant and near-constant sides -----------------------------------------------------------------------


def test_the_same_constant_on_both_sides_is_no_difference_whatever_the_counts():
    # the case: mean([0.1]*3) and mean([0.1]*4) differ by one ulp in floating point, and the
    # zero-spread branch took that for a difference (p = 0, "faster"). scipy is no reference here: its
    # ttest_ind([0.1]*4, [0.1]*3, equal_var=False) = (t -1.414, p 0.293), rounding noise as well. Exactly:
    # both sides are 0.1, the difference is 0, so p = 1 and the sides are equivalent.
    r = compare_values("ttft_c1", [0.1] * 3, [0.1] * 4)
    assert r.diff == 0.0 and r.p == 1.0 and r.lo == r.hi == 0.0
    assert r.verdict == f"{EQUIVALENT} within ±2 %" and r.mean_a == r.mean_b == 0.1


def test_no_constant_pair_is_significant():
    # the issue found 17 % of random constant cases called significant; exactly, none is: p = 1 each time
    for value in (0.1, 0.3, 1 / 3, 0.7, 1e-5, 123.456, 2.675, 29.7, 604.1):
        for n_a, n_b in ((3, 4), (3, 5), (5, 7), (6, 9), (7, 3)):
            r = compare_values("decode_c1", [value] * n_a, [value] * n_b)
            assert r.p == 1.0 and r.verdict not in (FASTER, SLOWER), (value, n_a, n_b, r.why)
    paired = compare_values("decode_c1", [0.7] * 6, [0.7] * 6, pairs=True)
    assert paired.diff == 0.0 and paired.p == 1.0


def test_near_constant_sides_are_judged_on_the_exact_values():
    # a = [0.1]*3, b = [0.1]*3 + [0.1 + u] (u = one ulp of 0.1). Exactly: diff = u/4; var(a) = 0,
    # var(b) = u²/4, so se = sqrt(u²/16) = u/4, t = 1 and df = n_b − 1 = 3: p = 2·scipy.stats.t.sf(1, 3)
    # = 0.3910022189557705 (scipy's ttest_ind on the floats says t = 0: its means round away the ulp).
    up = math.nextafter(0.1, 1.0)
    r = compare_values("decode_c1", [0.1] * 3, [0.1] * 3 + [up])
    assert r.df == pytest.approx(3.0) and r.p == pytest.approx(0.3910022189557705, rel=1e-9)
    assert r.diff == pytest.approx((up - 0.1) / 4, rel=1e-12) and r.verdict.startswith(EQUIVALENT)


# --- infinite run values ------------------------------------------------------------------------------------


def test_infinite_run_values_are_dropped_and_named():
    # reference: scipy.stats.ttest_ind(B, A, equal_var=False) without the infinite values:
    # p 1.0631402418817503e-06, df 8.0 (tests/report/test_compare.py)
    r = compare_values("decode_c1", [*A, INF], [-INF, *B])
    assert (r.n_a, r.n_b) == (5, 5) and r.p == pytest.approx(1.0631402418817503e-06, rel=1e-6)
    assert r.df == pytest.approx(8.0) and r.verdict == FASTER
    assert r.note == "1 infinite run value of A dropped; 1 infinite run value of B dropped"
    assert r.note in r.why
    paired = compare_values("decode_c1", [*A, 50.0], [*B, INF], pairs=True)
    # reference: scipy.stats.ttest_rel(B, A): p 9.131480382512278e-07 (the pair with inf drops out whole)
    assert paired.n_a == paired.n_b == 5 and paired.p == pytest.approx(9.131480382512278e-07, rel=1e-6)
    assert "each with its pair" in paired.note


def test_a_side_of_infinities_is_no_values_not_a_crash():
    r = compare_values("decode_c1", [INF, INF, INF], [1.0, 2.0, 3.0])
    assert r.verdict == rp.compare.NO_VALUES and "3 infinite run values of A dropped" in r.why


def test_run_stats_drops_infinite_values_and_says_so():
    # mean 50, s = 2, t(0.975, 2) = 4.30265: the interval of [48, 52, 50] (tests/report/test_intervals.py)
    rs = rp.stats.run_stats([48.0, INF, 52.0, -INF, 50.0], unit="boots")
    assert (rs.n, rs.mean, rs.dropped) == (3, 50.0, 2)
    assert rs.lo == pytest.approx(45.0317, abs=1e-4) and rs.hi == pytest.approx(54.9683, abs=1e-4)
    assert rs.method == "Student-t on 3 run means, 95 %; 2 infinite run values dropped"
    only = rp.stats.run_stats([INF])
    assert only.n == 0 and only.mean is None and only.method == "no run values; 1 infinite run value dropped"


# --- extreme magnitudes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1e200, 1e-160, 1e300, 1e-300])
def test_welch_and_paired_hold_at_extreme_magnitudes(scale):
    # The tests do not depend on the unit: reference scipy.stats.ttest_ind(B, A, equal_var=False) on the
    # values as given = p 1.0631402418817503e-06, df 8.0, CI (1.3194624890333553, 1.8805375109666618), and
    # scipy.stats.ttest_rel(B, A) = p 9.131480382512278e-07; CV numpy.std(A, ddof=1) / numpy.mean(A) =
    # 0.003845538596895514. (scipy itself gives way here: at 1e200 it
    # says p 1.0, df 1.0, at 1e-160 p 0.048: its squares overflow and underflow.)
    a, b = [x * scale for x in A], [x * scale for x in B]
    r = compare_values("decode_c1", a, b)
    assert r.df == pytest.approx(8.0) and r.p == pytest.approx(1.0631402418817503e-06, rel=1e-6)
    assert r.lo == pytest.approx(1.3194624890333553 * scale, rel=1e-9)
    assert r.hi == pytest.approx(1.8805375109666618 * scale, rel=1e-9)
    p = compare_values("decode_c1", a, b, pairs=True)
    assert p.p == pytest.approx(9.131480382512278e-07, rel=1e-6)
    rs = rp.stats.run_stats(a)
    assert rs.mean == pytest.approx(50.02 * scale) and rs.cv == pytest.approx(0.003845538596895514, rel=1e-9)


# --- the interval an equivalence verdict rests on -----------------------------------------------------------

EQ_A = [98.0, 100.0, 102.0, 99.0, 101.0]
EQ_B = [98.5, 100.0, 102.0, 99.0, 101.0]


def test_equivalence_is_shown_with_its_90_percent_interval():
    # reference: scipy.stats.ttest_ind(EQ_B, EQ_A, equal_var=False): p 0.9191172445479939,
    # df 7.922506577373833, confidence_interval(0.95) = (-2.103538711102492, 2.3035387111024805), past ±2;
    # confidence_interval(0.90) = (-1.6761477880965083, 1.8761477880964963), inside ±2; TOST p at ±2 % of
    # mean(EQ_A) = 100 from scipy.stats.t.sf/cdf with that df: 0.04095146250707612
    r = compare_values("decode_c1", EQ_A, EQ_B)
    assert r.verdict == f"{EQUIVALENT} within ±2 %"
    assert r.tost_p == pytest.approx(0.04095146250707612, rel=1e-6)
    assert (r.lo, r.hi) == (pytest.approx(-2.103538711102492), pytest.approx(2.3035387111024805))
    assert r.eq_lo == pytest.approx(-1.6761477880965083) and r.eq_hi == pytest.approx(1.8761477880964963)
    assert "the 90 % interval [-1.68, +1.88] % lies within ±2 %" in r.why
    row = rp.comparison_text.rows(_comparison([r]))[0]
    assert row["CI of B − A"] == "90 % [-1.68, +1.88] %"  # not the 95 % interval past the margin
    other = rp.comparison_text.rows(_comparison([compare_values("decode_c1", A, B)]))[0]
    assert other["CI of B − A"].startswith("95 % [")


def _comparison(rows):
    from labkit.report.comparison import Comparison, Side
    from labkit.report.gate import Gate

    side = Side("x", "x", (), "boots")
    return Comparison(side, side, Gate(), forced=False, margin=0.02, rows=list(rows))


# --- Holm across the measures of one comparison -------------------------------------------------------------


def test_holm_matches_statsmodels():
    from labkit.report.family import holm

    # reference: statsmodels.stats.multitest.multipletests(p, method="holm")[1]
    assert holm([0.01, 0.04, 0.03, 0.005, 0.2]) == pytest.approx([0.04, 0.09, 0.09, 0.025, 0.2])
    assert holm([0.02, 0.02, 0.5]) == pytest.approx([0.06, 0.06, 0.5])
    assert holm([0.7]) == [0.7] and holm([]) == []


# five measures, no real difference but in decode_c1 (-0.6 %). reference, per measure
# scipy.stats.ttest_ind(b, a, equal_var=False).pvalue, then multipletests(ps, method="holm"):
FAMILY = {
    "decode_c1": (A, [49.7, 49.5, 50.0, 49.6, 49.8], 0.03895354692519877, 0.19476773462599384),
    "decode_c2_agg": (
        [90.2, 89.7, 90.5, 90.1, 89.9],
        [90.4, 89.8, 90.0, 90.3, 89.6],
        0.7740704442861069,
        1.0,
    ),
    "prefill_4096": (
        [600.0, 602.0, 598.0, 601.0, 599.0],
        [601.0, 599.5, 600.5, 598.5, 602.5],
        0.6938180149028803,
        1.0,
    ),
    "prefill_12600": (
        [580.0, 583.0, 579.0, 581.0, 582.0],
        [582.0, 579.5, 581.0, 580.5, 583.0],
        0.835244097495359,
        1.0,
    ),
    "ttft_c1": ([0.050, 0.052, 0.049, 0.051, 0.050], [0.051, 0.049, 0.050, 0.052, 0.050], 1.0, 1.0),
}


def test_holm_decides_the_verdicts_of_a_family():
    from labkit.report.family import corrected, correction_text

    # a 0.5 % margin: -0.6 % cannot be shown equivalent, so the corrected verdict is no detectable difference
    alone = [compare_values(m, a, b, margin=0.005) for m, (a, b, _, _) in FAMILY.items()]
    assert alone[0].verdict == SLOWER  # at 5 % on its own, decode_c1 is "slower"
    rows = corrected(alone)
    for r, (_, _, p, p_holm) in zip(rows, FAMILY.values(), strict=True):
        assert r.p == pytest.approx(p, rel=1e-6, abs=1e-12) and r.p_adj == pytest.approx(p_holm, rel=1e-6)
        assert r.family == 5
    assert rows[0].verdict == NO_DIFFERENCE
    assert "Holm-adjusted over 5 measures p = 0.19 ≥ 0.05" in rows[0].why
    assert "the 95 % interval excludes 0, but not after the correction" in rows[0].why
    assert correction_text(rows).startswith("Holm over the 5 tested measures")
    assert correction_text(rows[:1]) == "none (one tested measure)"
