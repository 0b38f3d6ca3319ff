"""The trade-off plane of a sweep (labkit/report/pareto.py): which points are on the front, and which of the
others their runs cannot tell from it."""

from __future__ import annotations

from labkit.report.pareto import Cost, front, indistinguishable


def _c(label: str, x: float, y: float, x_low: float | None = None, y_low: float | None = None) -> Cost:
    return Cost(label, x, y, x if x_low is None else x_low, y if y_low is None else y_low)


def test_the_front_keeps_the_points_no_other_beats_on_both_costs():
    points = [_c("256", 0.4, 1.6), _c("1024", 1.4, 1.5), _c("4096", 1.41, 1.45), _c("bad", 1.5, 1.7)]
    assert front(points) == [0, 1, 2]  # "bad" is beaten by 1024 on both
    assert front([_c("a", 1, 1), _c("b", 1, 1)]) == [0, 1]  # equal points dominate neither
    assert front([_c("a", 1, 2), _c("b", 1, 1)]) == [1]  # no worse on x, better on y


def test_a_dominated_point_whose_interval_reaches_the_front_is_indistinguishable():
    points = [
        _c("a", 1.0, 1.0),
        _c("b", 2.0, 0.5),
        _c("near", 1.2, 1.1, 0.9, 0.9),
        _c("far", 3.0, 3.0, 2.5, 2.5),
    ]
    best = front(points)
    assert best == [0, 1]
    # near's low ends (0.9, 0.9) are beaten by no front point; far's (2.5, 2.5) are beaten by both
    assert indistinguishable(points, best) == [2]


def test_points_on_one_spot_share_one_label():
    from labkit.report.pareto import spots

    points = [_c("256, c1", 200.0, 200.0), _c("8192, c1", 200.1, 199.9), _c("256, c2", 260.0, 130.0)]
    assert spots(points) == {(200.0, 200.0): ["256, c1", "8192, c1"], (260.0, 130.0): ["256, c2"]}
