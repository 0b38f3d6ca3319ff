"""The fan-out benchmark's machine floor (benchmarks/fanout.py): what a 4-node/1-node ratio can be here."""

from __future__ import annotations

import time

from benchmarks.fanout import FanoutTiming, Window, machine_busy_seconds, metered, own_cpu_seconds, time_pair


def test_floor_is_the_node_side_cpu_bound_when_it_exceeds_one_node_time():
    # each 4-node run: 0.45 s of machine CPU of which 0.05 s labkit's own; 0.4 s on 2 CPUs takes >= 0.2 s
    four = [Window(s, 0.45, 0.05) for s in (0.25, 0.22, 0.3)]
    t = FanoutTiming(one=[0.1, 0.1, 0.1], four=four, cpus=2)
    assert t.ratio == 2.5
    assert abs(t.cpu_bound - 0.2) < 1e-9
    assert abs(t.floor_ratio - 2.0) < 1e-9
    line = t.line("x")
    assert "2.00x is the least this machine allows" in line and "labkit's own 50 ms not counted" in line
    assert "MISSED" in line


def test_labkits_own_cpu_does_not_raise_the_floor():
    # a controller that burns 0.4 s itself: the node side used 0.05 s, so the floor stays at one node's time
    t = FanoutTiming(one=[0.1], four=[Window(0.4, 0.45, 0.4)], cpus=2)
    assert t.floor_ratio == 1.0 and "4 nodes took 4.00x that floor" in t.line("x")


def test_no_floor_without_machine_counts():
    t = FanoutTiming(one=[0.1], four=[Window(0.2)], cpus=2)
    assert t.cpu_bound is None and t.floor_ratio is None
    assert "floor" not in t.line("x")


def test_machine_and_own_cpu_count_a_busy_loop():
    before, mine = machine_busy_seconds(), own_cpu_seconds()
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    assert machine_busy_seconds() - before >= 0.15  # /proc/stat ticks are 10 ms
    assert own_cpu_seconds() - mine >= 0.19


def test_time_pair_interleaves_and_meters_each_four_node_run():
    calls = []

    def fn(n):
        calls.append(n)
        return metered(lambda: time.sleep(0.01 * n))

    t = time_pair(fn, 3)
    assert calls == [1, 4, 1, 4, 1, 4]
    assert len(t.one) == len(t.four) == 3 and all(w.machine_cpu is not None for w in t.four)
    assert t.m4 > t.m1
