"""Statistics on degenerate data: constant and near-constant sides, infinite run values, extreme magnitudes,
the interval an equivalence verdict rests on, and Holm's correction across measures. Reference values come
from scipy (run once in a throwaway venv, written here: scipy is not a dependency) or, where scipy's own
floating point gives way, from the exact arithmetic written out beside them."""

from __future__ import annotations

import math

import pytest

from labkit import report as rp

INF = math.inf


def test_run_stats_drops_infinite_values_and_says_so():
    # mean 50, s = 2, t(0.975, 2) = 4.30265: the interval of [48, 52, 50] (tests/report/test_intervals.py)
    rs = rp.stats.run_stats([48.0, INF, 52.0, -INF, 50.0], unit="boots")
    assert (rs.n, rs.mean, rs.dropped) == (3, 50.0, 2)
    assert rs.lo == pytest.approx(45.0317, abs=1e-4) and rs.hi == pytest.approx(54.9683, abs=1e-4)
    assert rs.method == "Student-t on 3 run means, 95 %; 2 infinite run values dropped"
    only = rp.stats.run_stats([INF])
    assert only.n == 0 and only.mean is None and only.method == "no run values; 1 infinite run value dropped"
