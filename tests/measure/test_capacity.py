"""The capacity search and the sweep's rates (labkit/measure/summary/capacity.py; docs/measurement.md,
"Capacity under the SLO", "The sweep profile"), driven against a known capacity: which levels run, in what
order, and what the passes say."""

from __future__ import annotations

import pytest

from labkit.measure.summary.capacity import BOUNDARY_PASSES, Capacity, capacity, next_level, sweep_rates

pytestmark = pytest.mark.pure

LADDER = (1, 2, 4, 8, 16, 32, 64)


def search(ladder, closed, true_capacity, flaky=()):
    """Run the search against an engine meeting the SLO up to `true_capacity`; `flaky` (level, pass) misses."""
    results: list[tuple[float, bool]] = []
    passes: dict[float, int] = {}
    while (level := next_level(ladder, closed, results)) is not None:
        k = passes.get(level, 0)
        passes[level] = k + 1
        results.append((level, level <= true_capacity and (level, k) not in flaky))
        assert len(results) < 40, results
    return [level for level, _ in results], capacity(results)


def test_streams_climb_the_ladder_then_bisect_to_one_stream_and_repeat_the_boundary():
    ran, cap = search(LADDER, True, 11)
    assert ran == [1, 2, 4, 8, 16, 12, 10, 11, 11, 11]
    assert cap == Capacity(value=11, miss=12, passes=BOUNDARY_PASSES, miss_met=0, miss_passes=1)


def test_a_boundary_pass_that_misses_moves_the_capacity_down_and_says_so():
    ran, cap = search(LADDER, True, 11, flaky={(11, 1)})
    assert cap.value == 10 and cap.miss == 11 and (cap.miss_met, cap.miss_passes) == (1, 2)
    assert ran[-2:] == [10, 10]  # 10 gets its three passes


def test_rates_bisect_to_ten_percent():
    ran, cap = search((0.5, 1, 2, 4, 8), False, 3.1)
    assert cap.value is not None and cap.miss is not None
    assert cap.value <= 3.1 < cap.miss and (cap.miss - cap.value) / cap.miss <= 0.10
    assert ran.count(cap.value) == BOUNDARY_PASSES


def test_a_ladder_met_to_its_top_is_a_lower_bound_and_a_missed_first_rung_is_none():
    ran, cap = search(LADDER, True, 1000)
    assert cap.value == 64 and cap.miss is None and not cap.bounded and ran.count(64) == 3
    ran, cap = search(LADDER, True, 0)
    assert ran == [1] and cap.value is None and cap.miss == 1


def test_the_sweeps_rates_lie_evenly_between_the_ends_to_three_digits():
    assert sweep_rates(1.3, 9.7, 5) == (2.7, 4.1, 5.5, 6.9, 8.3)
    assert sweep_rates(2.0, 2.0, 5) == () and sweep_rates(3.0, 2.0, 5) == ()
    assert sweep_rates(1.0, 2.0, 2) == (1.33, 1.67)
