"""The process runtime after a reboot or kill -9: a pid file whose pid now names an unrelated process is stale.

labkit must then see the lane as absent (status, leftovers, a new `up`) and must never signal that process.
Pid reuse is emulated: the pid file is written by labkit's own start command, its engine is killed with
SIGKILL, and the pid in the file is replaced by that of an unrelated live `sleep` in its own process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from labkit.nodes.local import LocalHost
from labkit.serve import Lane
from labkit.serve.engines import NodeLaunch
from labkit.serve.runtimes import ProcessRuntime
from labkit.store import RunFolderSink
from tests.support.lanes import chat, sim_recipe
from tests.support.serving import served_plan


@pytest.fixture
def unrelated():
    """A live process that is not labkit's, leading its own process group (as an engine would)."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def stale_pid_file(rt: ProcessRuntime, node: str, state_dir: Path, pid: int) -> Path:
    """Start an engine with labkit's own start command, kill -9 it, and make its pid file name `pid` instead."""
    host = LocalHost()
    launch = NodeLaunch(node, 0, ("sleep", "30"), (), True)
    # Start times count clock ticks (10 ms): a real reused pid is never in its predecessor's start tick.
    time.sleep(0.05)
    r = host.run(rt.start_command(launch, None, []))
    assert r.ok, r.stderr
    engine = int(r.stdout.split()[0])
    os.killpg(engine, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while host.run(rt.leftovers_command()).stdout and time.monotonic() < deadline:
        time.sleep(0.05)
    f = state_dir / "lanes" / rt.lane_id / f"{node}.pid"
    assert f.read_text().split()[0] == str(engine)
    f.write_text(f"{pid}\n")
    return f


def assert_alive(proc: subprocess.Popen) -> None:
    time.sleep(0.2)
    assert proc.poll() is None, "labkit signalled a process that is not its own"


def test_stale_pid_file_is_absent_and_its_pid_is_left_alone(local_env, unrelated):
    rt, host = ProcessRuntime("labkit-stale-rt", stop_grace=0.5), LocalHost()
    pid_file = stale_pid_file(rt, "n", local_env.state_dir, unrelated.pid)
    assert host.run(rt.alive_command("n")).stdout.strip() == "absent"
    assert host.run(rt.leftovers_command()).stdout == ""
    assert host.run(rt.stop_command("n")).ok
    assert_alive(unrelated)
    assert (
        not pid_file.exists() and not pid_file.with_suffix(".started").exists()
    )  # the files go, not the process


def test_start_over_a_stale_pid_file_starts(local_env, unrelated):
    rt, host = ProcessRuntime("labkit-stale-rt2", stop_grace=0.5), LocalHost()
    stale_pid_file(rt, "n", local_env.state_dir, unrelated.pid)
    r = host.run(rt.start_command(NodeLaunch("n", 0, ("sleep", "30"), (), True), None, []))
    assert r.ok, r.stderr  # not "already running" (exit 17)
    assert host.run(rt.alive_command("n")).stdout.strip() == "alive"
    assert host.run(rt.stop_command("n")).ok
    assert_alive(unrelated)
    assert host.run(rt.alive_command("n")).stdout.strip() == "absent"


def test_reboot_makes_a_pid_file_stale(local_env):
    """Same pid, same start time, but another boot: the file belongs to a previous boot of the node."""
    rt, host = ProcessRuntime("labkit-stale-rt3", stop_grace=0.5), LocalHost()
    r = host.run(rt.start_command(NodeLaunch("n", 0, ("sleep", "30"), (), True), None, []))
    assert r.ok, r.stderr
    pid_file = local_env.state_dir / "lanes" / rt.lane_id / "n.pid"
    try:
        assert host.run(rt.alive_command("n")).stdout.strip() == "alive"
        started = pid_file.with_suffix(".started")  # beside the pid: the engine's start time and boot id
        start, boot = started.read_text().split()
        assert boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        assert (
            start
            == Path(f"/proc/{pid_file.read_text().strip()}/stat").read_text().rsplit(")", 1)[1].split()[19]
        )
        started.write_text(f"{start} 00000000-0000-0000-0000-000000000000\n")
        assert host.run(rt.alive_command("n")).stdout.strip() == "absent"
        assert host.run(rt.leftovers_command()).stdout == ""
    finally:
        os.killpg(int(r.stdout.split()[0]), signal.SIGKILL)


def test_lane_with_stale_pid_file_is_absent_and_boots(tmp_path, local_env, unrelated):
    plan = served_plan(sim_recipe(tmp_path / "lane-stale", 18341))
    lane = Lane(plan, sink=RunFolderSink(tmp_path / "run"), poll=0.1, stop_grace=1)
    stale_pid_file(lane.runtime, "localhost", local_env.state_dir, unrelated.pid)
    assert lane.status() == {"localhost": "absent"}
    assert lane.leftovers() == {}
    with lane.up() as ep:  # not LaneBusy
        assert chat(ep.base_url, ep.model)["usage"]["completion_tokens"] == 8
    assert_alive(unrelated)
    assert [p for p, _ in local_env.processes()] == [unrelated.pid]
