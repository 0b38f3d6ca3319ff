"""The fan-out benchmark's machine floor (benchmarks/fanout.py): what a 4-node/1-node ratio can be here."""

from __future__ import annotations

import time

from benchmarks.fanout import FanoutTiming, machine_busy_seconds, metered, time_pair


def test_floor_is_the_cpu_bound_when_four_nodes_need_more_cpu_than_one_node_takes():
    # 4 runs used 0.4 s of machine CPU each on 2 CPUs: no 4-node run can take less than 0.2 s.
    t = FanoutTiming(one=[0.1, 0.1, 0.1], four=[0.25, 0.22, 0.3], busy_four=[0.4, 0.4, 0.4], cpus=2)
    assert t.ratio == 2.5
    assert abs(t.cpu_bound - 0.2) < 1e-9
    assert abs(t.floor_ratio - 2.0) < 1e-9
    assert "2.00x is the least this machine allows" in t.line("x")
    assert "MISSED" in t.line("x")


def test_floor_is_one_node_time_when_cpu_is_no_bound():
    t = FanoutTiming(one=[0.5], four=[0.55], busy_four=[0.1], cpus=2)
    assert t.floor_ratio == 1.0
    assert "OK" in t.line("x")


def test_no_floor_without_cpu_counts():
    t = FanoutTiming(one=[0.1], four=[0.2], busy_four=[], cpus=2)
    assert t.cpu_bound is None and t.floor_ratio is None
    assert "floor" not in t.line("x")


def test_machine_busy_counts_a_busy_loop():
    before = machine_busy_seconds()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert machine_busy_seconds() - before >= 0.15  # /proc/stat ticks are 10 ms


def test_time_pair_interleaves_and_meters_each_four_node_run():
    calls = []

    def fn(n):
        calls.append(n)
        return metered(lambda: time.sleep(0.01 * n))

    t = time_pair(fn, 3)
    assert calls == [1, 4, 1, 4, 1, 4]
    assert len(t.one) == len(t.four) == len(t.busy_four) == 3
    assert t.m4 > t.m1
