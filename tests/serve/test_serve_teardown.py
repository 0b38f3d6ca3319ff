"""Teardown cannot be skipped: whatever fails or interrupts on the way out, nothing of the lane is left on any node.

Real parts as in test_serve.py (sshd nodes + docker shim, the simulator); a real SIGINT is sent to this process
at the exact step under test by wrapping that step (the fault injection), everything else runs unchanged.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import sys
import threading
import time
from contextlib import contextmanager

import pytest

from labkit.serve import Lane
from labkit.store import RunFolderSink
from tests.support.lanes import sim_recipe
from tests.support.nodes import NODE_NAMES, REPO
from tests.support.serving import assert_clean_cluster, cluster_lane, labkit_cli, served_plan


def sigint_first(step):
    """`step`, but with a real Ctrl-C (SIGINT to this process) arriving just before it runs."""

    def wrapped(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # the signal is handled here, before the step, unless SIGINT is ignored
        return step(*args, **kwargs)

    return wrapped


def engine_prints(cluster, lane: Lane, node: str, text: str) -> None:
    """Append `text` to the node's container log, as if the engine printed it (the sim prints nothing per request)."""
    log = cluster.shim_state / NODE_NAMES[node] / "containers" / f"{lane.runtime.name(node)}.log"
    with open(log, "a") as f:
        f.write(text)


@contextmanager
def cleaned(lane: Lane):
    """The block runs; then whatever a test that failed before its fix left behind is removed, and the lane
    closed, so later tests start clean."""
    try:
        yield lane
    finally:
        remove_leftovers(lane)
        lane.close()


def remove_leftovers(lane: Lane) -> None:
    """After a test that failed before the fix: take away whatever it left, so later tests start clean."""
    for injected in ("capture_logs", "dead_node_report", "start_all", "status"):
        vars(lane).pop(injected, None)
    with_logs = lane.sink
    lane.sink = None
    try:
        lane.down()
    finally:
        lane.sink = with_logs


def test_unwritable_log_file_does_not_skip_removal(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18331, name="lane-badlog")
    with cleaned(lane):
        with lane.up():
            head = lane.group.head.name
            engine_prints(cluster, lane, head, "INFO a line printed after readiness\n")  # fetched at teardown
            log = tmp_path / "run" / "logs" / f"{head}.log"
            log.unlink()
            log.mkdir()  # writing the rest of the log now fails (IsADirectoryError), as on a broken run folder
        assert_clean_cluster(lane, cluster)


def test_ctrl_c_while_logs_are_captured_still_removes_everything(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18332, name="lane-int-capture")
    with cleaned(lane):
        try:
            with lane.up():
                lane.capture_logs = sigint_first(lane.capture_logs)
        except KeyboardInterrupt:
            pass  # before the fix the interrupt escaped here, ahead of any removal
        assert_clean_cluster(lane, cluster)


def test_interrupt_raised_inside_log_capture_still_removes_everything(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18333, name="lane-raise-capture")

    def capture_then_interrupt():
        raise KeyboardInterrupt

    with cleaned(lane):
        with pytest.raises(KeyboardInterrupt), lane.up():
            lane.capture_logs = capture_then_interrupt
        assert_clean_cluster(lane, cluster)


def test_ctrl_c_during_dead_node_report_still_removes_everything(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18334, name="lane-int-report")
    with cleaned(lane):
        try:
            with pytest.raises(RuntimeError, match="client gave up"), lane.up():
                lane.dead_node_report = sigint_first(lane.dead_node_report)
                raise RuntimeError("client gave up")
        except KeyboardInterrupt:
            pass  # before the fix the interrupt escaped here, ahead of any removal
        assert_clean_cluster(lane, cluster)


def test_no_dead_node_report_after_ctrl_c(tmp_path, local_env):
    """Ctrl-C inside the block goes straight to removal: no status/log round trips first, no LaneFailed."""
    plan = served_plan(sim_recipe(tmp_path / "lane-kbint", 18335))
    lane = Lane(plan, sink=RunFolderSink(tmp_path / "run"), poll=0.1, stop_grace=3)
    asked: list[str] = []
    status = lane.status
    lane.status = lambda: asked.append("status") or status()
    with pytest.raises(KeyboardInterrupt), lane.up():
        raise KeyboardInterrupt
    assert asked == [] and local_env.processes() == []
    assert lane.leftovers() == {}


def test_broken_run_folder_during_boot_still_removes_everything(cluster, tmp_path):
    """The boot watcher cannot write node logs (run folder replaced by a file): the boot fails, nothing is left."""
    lane = cluster_lane(cluster, tmp_path, 18336, name="lane-badfolder", settings={"boot_weights_s": 2})
    folder = tmp_path / "run"
    folder.mkdir(parents=True, exist_ok=True)
    real_start_all = lane.start_all

    def start_then_break_folder():
        real_start_all()
        shutil.rmtree(folder / "logs")
        (folder / "logs").write_text("not a folder")

    lane.start_all = start_then_break_folder
    with cleaned(lane):
        with pytest.raises(OSError), lane.up():
            pytest.fail("must not boot")
        assert_clean_cluster(lane, cluster)


# ---------------------------------------------------------------------------------------------- starts in flight


@pytest.fixture
def local_docker(tmp_path, monkeypatch, local_env):
    """This machine as a docker node: the test docker shim (and python3 = this interpreter) first on PATH."""
    shim_dir, state = tmp_path / "shim", tmp_path / "shim-state"
    shim_dir.mkdir()
    docker = shim_dir / "docker"
    docker.write_text(f"#!{sys.executable}\n" + (REPO / "tests" / "support" / "docker_shim.py").read_text())
    python3 = shim_dir / "python3"
    python3.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    for f in (docker, python3):
        f.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("LABKIT_SHIM_STATE", str(state))
    monkeypatch.setenv("LABKIT_TEST_NODE", "local")
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return state


def ctrl_c_once_started(calls_of, nodes, set_delay, issued: dict, progress: io.StringIO, again: bool) -> None:
    """Once every node's shim has begun its (slowed) `docker run`: removal commands fast again, then Ctrl-C.
    With `again`, a second Ctrl-C once labkit says it waits for the start commands (the impatient user)."""
    deadline = time.monotonic() + 30
    while not all(any(c[0] == "run" for c in calls_of(n)) for n in nodes):
        if time.monotonic() > deadline:
            return
        time.sleep(0.02)
    issued["at"] = time.monotonic()
    time.sleep(0.3)  # every shim has read the delay and sleeps in it
    set_delay(0)
    os.kill(os.getpid(), signal.SIGINT)
    if not again:
        return
    deadline = time.monotonic() + 20
    while "waiting up to" not in progress.getvalue():
        if time.monotonic() > deadline:
            return  # no second Ctrl-C: it could only land in the test itself
        time.sleep(0.02)
    issued["again"] = time.monotonic()
    os.kill(os.getpid(), signal.SIGINT)


def interrupt_starts(lane: Lane, calls_of, nodes, set_delay, delay: float, again: bool = False) -> dict:
    """Start `lane` with every `docker run` taking `delay` s and Ctrl-C meanwhile (twice with `again`).

    Returns when start() raised: {"at": when the starts were seen running, "again": when the second Ctrl-C was
    sent, "returned": when start() raised, "said": the progress text}."""
    issued: dict = {}
    lane.progress = io.StringIO()
    start_all = lane.start_all

    def slowed_start_all():  # only the start commands are slow, not the checks before them
        set_delay(delay)
        start_all()

    lane.start_all = slowed_start_all
    t = threading.Thread(
        target=ctrl_c_once_started,
        args=(calls_of, nodes, set_delay, issued, lane.progress, again),
        daemon=True,
    )
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lane.start()
        issued["returned"] = time.monotonic()
    finally:
        set_delay(0)
        t.join(30)
        del lane.start_all
    issued["said"] = lane.progress.getvalue()
    assert "at" in issued, issued["said"]
    return issued


def until_starts_returned(issued: dict, delay: float) -> None:
    """Sleep until the slowed starts have returned, so whatever they started is there to be found (or removed)."""
    time.sleep(max(0.0, issued["at"] + delay + 1.5 - time.monotonic()))


def test_ctrl_c_while_local_start_is_in_flight_leaves_nothing(tmp_path, local_env, local_docker):
    plan = served_plan(sim_recipe(tmp_path / "lane-local-docker", 18337, runtime="docker"))
    lane = Lane(plan, sink=RunFolderSink(tmp_path / "run"), poll=0.1, stop_grace=3)

    def set_delay(seconds: float) -> None:
        f = local_docker / "delay"
        local_docker.mkdir(exist_ok=True)
        f.write_text(str(seconds)) if seconds else f.unlink(missing_ok=True)

    def calls_of(_node: str) -> list[list[str]]:
        f = local_docker / "local" / "calls.jsonl"
        return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []

    try:
        issued = interrupt_starts(lane, calls_of, ["localhost"], set_delay, delay=3)
        until_starts_returned(issued, 3)
        assert lane.leftovers() == {}
        assert sorted((local_docker / "local" / "containers").glob("*.json")) == []
        assert local_env.processes() == []
        said = issued["said"]
        assert "waiting up to" in said and "localhost" in said, said
    finally:
        remove_leftovers(lane)


def test_ctrl_c_while_cluster_starts_are_in_flight_leaves_nothing(cluster, tmp_path):
    cluster.clear_calls()
    lane = cluster_lane(cluster, tmp_path, 18338, name="lane-4x-inflight")
    with cleaned(lane):
        issued = interrupt_starts(lane, cluster.calls, cluster.addresses, cluster.set_docker_delay, delay=3)
        until_starts_returned(issued, 3)
        assert_clean_cluster(lane, cluster)
        said = issued["said"]
        assert "waiting up to" in said and all(a in said for a in cluster.addresses), said


# a race of the shims' start delay against the two Ctrl-Cs: beside a vLLM boot on the other worker, a slow node's
# start command once returned after the last removal (CI of f57e1fb), so it runs while no other test runs
@pytest.mark.alone
def test_second_ctrl_c_ends_the_wait_for_in_flight_starts(cluster, tmp_path):
    """Ctrl-C again while labkit waits for start commands it cannot recall: it stops waiting at once, still
    removes the lane once more on every node, and names the nodes where an engine may yet start."""
    cluster.clear_calls()
    lane = cluster_lane(cluster, tmp_path, 18340, name="lane-4x-impatient")
    fast = lane.group.hosts[1]  # this node's daemon is quick: its container exists before the Ctrl-C
    run = fast.run
    fast.run = lambda cmd, **kw: run(
        "LABKIT_SHIM_DELAY=0 " + cmd if cmd.startswith("docker run") else cmd, **kw
    )
    slow = [a for a in cluster.addresses if a != fast.name]
    delay = 10
    with cleaned(lane):
        issued = interrupt_starts(
            lane, cluster.calls, cluster.addresses, cluster.set_docker_delay, delay, again=True
        )
        said = issued["said"]
        assert "again" in issued, said
        assert issued["returned"] - issued["again"] < 3, said
        # What was created is gone, and the final removal ran on every node (labkit's own connections to the
        # slow nodes are still busy with their start commands: the shim's records are read directly).
        assert all(cluster.containers(a) == [] for a in cluster.addresses), said
        assert all(sum(c[0] == "rm" for c in cluster.calls(a)) == 2 for a in cluster.addresses), said
        warning = [line for line in said.splitlines() if line.startswith("WARNING: the start command on")]
        assert len(warning) == 1, said
        assert all(a in warning[0] for a in slow) and fast.name not in warning[0], said
        assert f"labkit down {lane.plan.recipe}" in warning[0], said
        until_starts_returned(issued, delay)
        remove_leftovers(lane)
        assert_clean_cluster(lane, cluster)


# ---------------------------------------------------------------------------------------------- slow node poll


def test_ctrl_c_while_a_node_poll_is_slow_says_so_and_saves_no_log_text_twice(tmp_path, local_env):
    """Ctrl-C during readiness while the boot watcher's poll of a node hangs (a slow node; the poll may take its
    60 s timeout): labkit says what it waits for, a second Ctrl-C ends that wait, and the teardown's log capture
    and the late poll never both save the same text."""
    plan = served_plan(sim_recipe(tmp_path / "lane-slowpoll", 18342, settings={"boot_weights_s": 60}))
    lane = Lane(plan, sink=RunFolderSink(tmp_path / "run"), poll=0.1, node_poll=0.2, stop_grace=3)
    lane.progress = io.StringIO()
    mark = "INFO a line the slow poll fetches"
    engine_log = local_env.state_dir / "lanes" / lane.lane_id / "localhost.log"
    saved_log = tmp_path / "run" / "logs" / "localhost.log"
    polled, returned = threading.Event(), threading.Event()
    host = lane.group.head
    run = host.run

    def slow_poll(cmd, **kw):
        r = run(cmd, **kw)
        if "--labkit-log--" in cmd and mark in r.stdout:  # the boot watcher's poll that fetched the mark
            polled.set()
            time.sleep(6)
            returned.set()
        return r

    host.run = slow_poll
    times: dict[str, float] = {}

    def ctrl_c_twice() -> None:
        deadline = time.monotonic() + 30
        while not (saved_log.exists() and "Starting to load model" in saved_log.read_text()):
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        with open(engine_log, "a") as f:  # the engine prints (the simulator sleeps in its weight loading now)
            f.write(mark + "\n")
        if not polled.wait(10):
            return
        times["first"] = time.monotonic()
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 2
        while "poll of localhost" not in lane.progress.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGINT)  # before the fix this one cut the wait short, silently

    t = threading.Thread(target=ctrl_c_twice, daemon=True)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lane.start()
        took = time.monotonic() - times["first"]
        said = lane.progress.getvalue()
        assert took < 4, said
        assert "waiting up to" in said and "poll of localhost" in said, said
        assert returned.wait(10)
        time.sleep(0.5)  # the late poll records what it fetched
        lines = saved_log.read_text().splitlines()
        assert lines.count(mark) == 1, lines
        assert len(lines) == len(set(lines)), lines
        assert lane.leftovers() == {} and local_env.processes() == []
    finally:
        t.join(10)
        remove_leftovers(lane)


# ---------------------------------------------------------------------------------------------- SIGHUP


def test_ssh_session_closed_during_boot_removes_everything(tmp_path, local_env):
    """Closing the SSH/tmux session running `labkit up`: SIGHUP, and the terminal it printed to is gone."""
    plan = sim_recipe(tmp_path / "lane-hup", 18339, settings={"boot_weights_s": 60})
    proc = labkit_cli("up", str(tmp_path / "lane-hup"), "--logs", str(tmp_path / "run"))
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if "waiting for readiness" in line:
            break
    assert "waiting for readiness" in "".join(seen), "".join(seen)
    time.sleep(0.5)
    proc.stderr.close()  # every later progress line meets a closed pipe, as on a closed terminal
    proc.send_signal(signal.SIGHUP)
    proc.wait(60)
    assert proc.returncode != -signal.SIGHUP  # not killed by the signal: it ran its teardown
    lane = Lane(plan, progress=None)
    assert lane.status() == {"localhost": "absent"}
    assert lane.leftovers() == {} and local_env.processes() == []
