"""Open-loop arrival schedules and the client-bound rule (labkit/measure/request/arrivals.py;
docs/measurement.md, "Load levels and arrival schedules"): one seed gives one schedule, the rates and spreads are
the ones asked for, and a hostile argument is refused naming it."""

from __future__ import annotations

import math
import statistics

import pytest

from labkit.measure.request.arrivals import (
    ARRIVALS,
    LATENESS_FLOOR_S,
    ClientBound,
    client_bound,
    lateness_threshold,
    level_seed,
    ramped,
    send_times,
)
from labkit.measure.summary.latency import percentile as linear_percentile

pytestmark = pytest.mark.pure

DRAWS = 20_000  # gaps per statistical check: the mean's standard error is 1/sqrt(DRAWS) = 0.7 % for Poisson


def gaps(times: tuple[float, ...]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:], strict=False)]


@pytest.mark.parametrize("arrival", ARRIVALS)
def test_one_seed_gives_one_schedule_and_another_seed_another(arrival):
    kw = {"arrival": arrival, "requests": 200}
    a = send_times(4.0, level_seed(7, 4.0), **kw)
    assert a == send_times(4.0, level_seed(7, 4.0), **kw)  # two lanes, same arrivals
    assert len(a) == 200 and a[0] == 0.0 and all(x <= y for x, y in zip(a, a[1:], strict=False))
    other = send_times(4.0, level_seed(8, 4.0), **kw)
    assert (a == other) == (arrival == "constant")  # only the constant schedule ignores its seed


def test_a_levels_seed_depends_on_its_rate_and_the_run_seed_only():
    assert level_seed(7, 2) == level_seed(7, 2.0) == "7/rate=2.0"
    assert level_seed(None, 0.5) == "None/rate=0.5" and level_seed("a", 1.0) != level_seed("b", 1.0)
    assert send_times(2.0, level_seed(7, 2.0), requests=50) != send_times(
        3.0, level_seed(7, 3.0), requests=50
    )


def test_a_constant_schedule_is_exact():
    assert send_times(4.0, "s", arrival="constant", requests=5) == (0.0, 0.25, 0.5, 0.75, 1.0)
    # by duration: every i/R before the end, and the end itself excluded
    assert send_times(4.0, "s", arrival="constant", duration_s=1.0) == (0.0, 0.25, 0.5, 0.75)
    many = send_times(3.0, "s", arrival="constant", requests=3001)
    assert many[3000] == 1000.0 and many[-1] == 3000 / 3.0  # i/R computed, no rounding piled up


@pytest.mark.parametrize(
    "arrival,burstiness", [("poisson", None), ("gamma", 0.25), ("gamma", 1.0), ("gamma", 4.0)]
)
def test_the_mean_rate_is_the_asked_one(arrival, burstiness):
    """Mean gap within 3 % of 1/R over 20,000 seeded draws (4 standard errors for Poisson, 2 for b = 0.25,
    whose gaps spread twice as much)."""
    times = send_times(5.0, "mean", arrival=arrival, burstiness=burstiness, requests=DRAWS + 1)
    assert statistics.fmean(gaps(times)) == pytest.approx(0.2, rel=0.03)
    # by duration: about R·D sends (Poisson count's standard deviation sqrt(R·D) = 1 %; b = 0.25 about 2 %)
    assert len(send_times(5.0, "mean", arrival=arrival, burstiness=burstiness, duration_s=2000.0)) == (
        pytest.approx(10_000, rel=0.06)
    )


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 1.0, 2.0, 4.0])
def test_gamma_gaps_spread_as_one_over_root_burstiness(burstiness):
    """Coefficient of variation within 6 % of 1/sqrt(b) over 20,000 seeded gaps; b = 1 is Poisson's 1."""
    g = gaps(send_times(2.0, "cv", arrival="gamma", burstiness=burstiness, requests=DRAWS + 1))
    cv = statistics.stdev(g) / statistics.fmean(g)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.06)


def test_poisson_gaps_spread_as_one():
    g = gaps(send_times(2.0, "cv", requests=DRAWS + 1))
    assert statistics.stdev(g) / statistics.fmean(g) == pytest.approx(1.0, rel=0.05)


@pytest.mark.parametrize(
    "kwargs,named",
    [
        ({"rate": 0.0}, "rate"),
        ({"rate": -1.0}, "rate"),
        ({"rate": math.nan}, "rate"),
        ({"rate": math.inf}, "rate"),
        ({"rate": True}, "rate"),
        ({"arrival": "gamma", "burstiness": 0.0}, "burstiness"),
        ({"arrival": "gamma", "burstiness": -2.0}, "burstiness"),
        ({"arrival": "gamma", "burstiness": math.nan}, "burstiness"),
        ({"arrival": "gamma", "burstiness": math.inf}, "burstiness"),
        ({"arrival": "poisson", "burstiness": 2.0}, "burstiness"),
        ({"arrival": "uniform"}, "arrival"),
        ({"requests": 0}, "requests"),
        ({"requests": 2.5}, "requests"),
        ({"requests": None, "duration_s": 0.0}, "duration_s"),
        ({"requests": None, "duration_s": math.nan}, "duration_s"),
        ({"requests": None, "duration_s": -3.0}, "duration_s"),
        ({"requests": None}, "requests, duration_s"),
        ({"duration_s": 10.0}, "requests, duration_s"),
        ({"rate": 1e6, "requests": None, "duration_s": 1e6}, "rate, duration_s"),
        ({"seed": 7}, "seed"),
    ],
)
def test_hostile_arguments_are_refused_naming_them(kwargs, named):
    args = {"rate": 2.0, "seed": "s", "requests": 10, **kwargs}
    with pytest.raises(ValueError, match=rf"^{named}:"):
        send_times(args.pop("rate"), args.pop("seed"), **args)


def test_a_ramp_raises_the_rate_from_zero_and_keeps_the_count():
    steady = send_times(10.0, "ramp", arrival="constant", requests=201)  # 0 .. 20 s
    up = ramped(steady, 4.0)
    assert ramped(steady, 0) == steady and len(up) == len(steady)
    assert up[0] == 0.0 and up[-1] == pytest.approx(22.0)  # the level gets ramp/2 longer
    assert up[10] == pytest.approx(math.sqrt(2 * 4.0 * 1.0))  # u = 1 s, inside the ramp's first half
    assert up[100] == pytest.approx(12.0)  # past it: shifted by ramp/2
    ramp_gaps, late_gaps = gaps(up[:20]), gaps(up[150:])
    assert ramp_gaps[0] > ramp_gaps[-1] > 0.1 and late_gaps == pytest.approx([0.1] * len(late_gaps))
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"^ramp_s:"):
            ramped(steady, bad)


def test_the_lateness_percentile_interpolates_linearly_as_numpys_default():
    """client_bound's default quantile is the load statistics' percentile (labkit/measure/summary/latency.py)."""
    values = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert linear_percentile(values, 50) == 3.0 and linear_percentile(values, 0) == 1.0
    assert linear_percentile(values, 100) == 5.0
    assert linear_percentile(values, 99) == pytest.approx(4.96)  # rank 3.96: 4 + 0.96 · (5 − 4)
    assert linear_percentile([1.0, 2.0], 25) == 1.25 and linear_percentile([7.0], 99) == 7.0
    assert linear_percentile([], 50) is None
    with pytest.raises(ValueError, match="101"):
        linear_percentile(values, 101)


def test_the_lateness_threshold_is_the_larger_of_the_floor_and_the_share():
    assert lateness_threshold(1.0) == pytest.approx(0.05)  # 1 req/s: 5 % of 1 s
    assert lateness_threshold(0.01) == LATENESS_FLOOR_S == 0.001  # 100 req/s: 0.5 ms, below the floor
    assert lateness_threshold(0.1, floor_s=0.002, share=0.1) == pytest.approx(0.01)
    for kwargs, named in (
        ({"mean_gap_s": 0.0}, "mean_gap_s"),
        ({"mean_gap_s": math.inf}, "mean_gap_s"),
        ({"floor_s": -0.001}, "floor_s"),
        ({"share": 0.0}, "share"),
        ({"share": 1.0}, "share"),
        ({"share": math.nan}, "share"),
    ):
        with pytest.raises(ValueError, match=rf"^{named}:"):
            lateness_threshold(**{"mean_gap_s": 0.5, **kwargs})


def test_a_level_is_client_bound_when_its_p99_lateness_exceeds_the_threshold():
    on_time = [0.0002] * 99 + [0.004]  # p99 = 0.0002 + 0.01·(0.004 − 0.0002) ≈ 0.24 ms
    verdict = client_bound(on_time, mean_gap_s=0.01)
    assert verdict == ClientBound(pytest.approx(0.000238), 0.001, 99.0, False)
    late = [0.0002] * 90 + [0.003] * 10  # a tenth of the sends 3 ms late: p99 = 3 ms > max(1 ms, 0.5 ms)
    assert client_bound(late, mean_gap_s=0.01).bound
    # the same lateness at 1 req/s is within 5 % of a 1 s gap
    assert not client_bound(late, mean_gap_s=1.0).bound
    # the threshold and percentile are the caller's (recipe keys), and so is the percentile function
    assert client_bound(late, 0.01, floor_s=0.005).bound is False
    assert client_bound(late, 0.01, percentile=50).bound is False
    assert client_bound(late, 0.01, quantile=lambda v, q: max(v)).late_s == 0.003
    for bad, named in (([], "lateness_s"), ([0.0, math.nan], r"lateness_s\[1\]"), ([0.0], "mean_gap_s")):
        with pytest.raises(ValueError, match=rf"^{named}:"):
            client_bound(bad, 0.0 if named == "mean_gap_s" else 0.01)
