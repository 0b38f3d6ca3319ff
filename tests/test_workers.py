"""Tests side by side (tests/support/workers.py): the xdist group of each kind of test, the ports dealt to each
worker, and the lock that lets a timing truth run alone."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.support import workers
from tests.support.workers import (
    ALONE,
    NODES,
    RECIPE_SIM,
    VLLM,
    Turns,
    free_port,
    group_of,
    run_order,
    without_workers,
)


@pytest.mark.parametrize(
    ("tiers", "scopes", "fixtures", "group"),
    [
        ({"vllm"}, {"function", "session"}, {"vllm_lane", "vllm_shared"}, VLLM),
        ({"vllm"}, {"function"}, {"vllm_fresh"}, VLLM),
        ({"docker", "vllm", "ssh"}, {"session"}, {"cluster"}, VLLM),
        ({"pure"}, {"module"}, {"vllm_shared"}, VLLM),
        ({"llamacpp"}, {"module"}, set(), "tests/x/test_a.py"),
        ({"llamacpp", "ssh"}, {"session"}, {"cluster"}, "tests/x/test_a.py"),
        ({"ssh"}, {"function", "session"}, {"nodes", "cluster"}, NODES),
        ({"sim"}, {"function"}, set(), "tests/x/test_a.py"),
        ({"notebook"}, {"function"}, set(), "tests/x/test_a.py"),
        ({"pure"}, {"module", "function"}, set(), "tests/x/test_a.py"),
        ({"pure"}, {"function", "session"}, {"tmp_path"}, None),
    ],
)
def test_each_kind_of_test_gets_its_group(tiers, scopes, fixtures, group):
    assert group_of(tiers, scopes, fixtures, "tests/x/test_a.py") == group


def test_a_module_with_an_alone_test_is_in_the_alone_group_unless_it_boots_vllm_or_uses_the_nodes():
    assert group_of({"sim"}, {"module"}, set(), "tests/x/test_a.py", alone_module=True) == ALONE
    assert group_of({"pure"}, {"function"}, set(), "tests/x/test_a.py", alone_module=True) == ALONE
    assert group_of({"docker", "vllm"}, {"module"}, set(), "tests/x/test_a.py", alone_module=True) == VLLM
    assert group_of({"ssh"}, {"session"}, {"nodes"}, "tests/x/test_a.py", alone_module=True) == NODES


def test_the_alone_tests_go_first_then_the_light_ones_the_longest_groups_and_the_rest_by_size():
    # (group, name, alone, light)
    items = [
        (None, "p1", False, False),
        ("m1", "a", False, True),
        (NODES, "n1", False, False),
        (ALONE, "s1", False, True),
        (None, "l1", False, True),
        ("m2", "b", False, False),
        (VLLM, "v1", False, False),
        (ALONE, "t1", True, False),
        ("m2", "c", False, False),
        (None, "p2", False, False),
        (ALONE, "t2", True, False),
        (NODES, "n2", False, False),
        (None, "l2", False, True),
        (RECIPE_SIM, "r1", False, False),
    ]
    ordered = [i[1] for i in run_order(items, lambda i: i[0], lambda i: i[2], lambda i: i[3])]
    assert ordered == ["t1", "t2", "s1", "l1", "l2", "r1", "v1", "n1", "n2", "b", "c", "a", "p1", "p2"]
    without_light = [i[1] for i in run_order(items, lambda i: i[0], lambda i: i[2])]
    assert without_light == ["t1", "t2", "s1", "r1", "v1", "n1", "n2", "b", "c", "a", "p1", "l1", "p2", "l2"]


def test_a_test_that_may_end_the_shared_vllm_lane_runs_after_every_other_test_on_it():
    from tests.support.vllm_fixtures import enders_last

    # (name, uses the shared lane, may end it)
    items = [
        ("a", False, False),
        ("kill", True, True),
        ("b", True, False),
        ("c", True, False),
        ("d", False, False),
    ]
    moved = enders_last(items, lambda i: i[1], lambda i: i[2])
    assert [i[0] for i in moved] == ["a", "b", "c", "kill", "d"]
    alone = [("a", False, False), ("kill", True, True)]
    assert enders_last(alone, lambda i: i[1], lambda i: i[2]) == alone  # no other user: left where it is


def test_each_worker_takes_only_its_share_of_a_port_range(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    low = 18430
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    first = free_port(low, low + 9)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    second = free_port(low, low + 9)
    assert first % 2 == 0 and second % 2 == 1
    monkeypatch.delenv("PYTEST_XDIST_WORKER")
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT")
    assert workers.worker() == (0, 1)


def test_an_alone_test_waits_for_the_shared_holders_and_keeps_new_ones_out(tmp_path):
    run = uuid.uuid4().hex
    events: list[str] = []
    shared_in, release_shared = threading.Event(), threading.Event()

    def holder(name: str, alone: bool, hold: threading.Event | None = None) -> None:
        turns = Turns(run, tmp_path)  # one per worker: each has its own open files, so their locks conflict
        turns.take(alone)
        events.append(f"{name} in")
        if hold is not None:
            shared_in.set()
            hold.wait(10)
        events.append(f"{name} out")
        turns.done(None)

    first = threading.Thread(target=holder, args=("shared", False, release_shared))
    first.start()
    assert shared_in.wait(10)
    alone = threading.Thread(target=holder, args=("alone", True))
    alone.start()
    time.sleep(0.3)  # the alone test now waits at the lock, holding the gate
    late = threading.Thread(target=holder, args=("late", False))
    late.start()
    time.sleep(0.3)
    assert events == ["shared in"]  # neither the alone test nor a later shared one got in beside it
    release_shared.set()
    for t in (first, alone, late):
        t.join(10)
    assert events == ["shared in", "shared out", "alone in", "alone out", "late in", "late out"]


def test_a_worker_keeps_its_exclusive_hold_across_alone_tests_only(tmp_path):
    mine, other = Turns("r", tmp_path), Turns("r", tmp_path)
    mine.take(True)
    mine.done(True)  # the next test is alone too: still held
    assert mine.alone is True
    blocked = threading.Thread(target=other.take, args=(False,))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()  # the other worker's shared test waits
    mine.take(True)  # the next alone test: no new lock taken, no wait
    mine.done(False)  # followed by a shared test: let go
    blocked.join(10)
    assert not blocked.is_alive() and other.alone is False and mine.alone is None
    other.done(False)
    assert other.alone is None  # a shared hold never outlives its test


def test_a_light_test_runs_beside_an_alone_test_at_a_lower_priority_it_then_gives_back(tmp_path):
    alone, light = Turns("r", tmp_path), Turns("r", tmp_path)
    alone.take(True)
    before = os.getpriority(os.PRIO_PROCESS, 0)
    got_in = threading.Event()

    def run_light() -> None:  # a thread of its own, as a worker's main thread: nice values are per thread
        light.take(False, light=True)
        got_in.set()
        niced.append(os.getpriority(os.PRIO_PROCESS, 0))
        light.done(False)
        niced.append(os.getpriority(os.PRIO_PROCESS, 0))

    niced: list[int] = []
    t = threading.Thread(target=run_light)
    t.start()
    assert got_in.wait(10)  # it did not wait for the alone test's lock
    t.join(10)
    alone.done(None)
    assert light.alone is None and alone.alone is None
    if workers.can_lower_nice():
        assert niced == [max(before, workers.LIGHT_NICE), before]
    else:
        assert niced == [before, before]  # never raised where it could not be lowered again
    niced.clear()
    shared = Turns("r", tmp_path)
    shared.take(False)
    t = threading.Thread(target=run_light)  # beside a shared holder only: at its own priority
    t.start()
    t.join(10)
    shared.done(None)
    assert niced == [before, before]


def test_outside_xdist_no_lock_is_taken(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_TESTRUNUID", raising=False)
    first, second = Turns(), Turns()
    first.take(True)
    second.take(True)  # would wait for ever if a lock were taken
    assert first.alone is None and second.alone is None


def test_a_pytest_run_started_by_a_test_leaves_the_workers_variables_out():
    env = {"PATH": "/bin", "PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_TESTRUNUID": "x"}
    assert without_workers(env) == {"PATH": "/bin"}


GROUPED = """
import os
import pytest

@pytest.mark.xdist_group("one")
@pytest.mark.parametrize("n", range(4))
def test_grouped(n):
    with open(os.path.join(os.environ["RAN_IN"], f"ran-{n}"), "w") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.parametrize("n", range(4))
def test_free(n):
    pass
"""


def test_loadgroup_keeps_a_group_on_one_worker(tmp_path):
    """The installed pytest and pytest-xdist honour `xdist_group` (pytest 9 with xdist 3.8 split every group)."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "test_grouped.py").write_text(GROUPED)
    args = ["-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder", "-p", "no:cacheprovider"]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *args, "t"],
        cwd=tmp_path,
        env={**without_workers(dict(os.environ)), "RAN_IN": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ran = {p.read_text() for p in tmp_path.glob("ran-*")}
    assert len(list(tmp_path.glob("ran-*"))) == 4 and len(ran) == 1, ran
