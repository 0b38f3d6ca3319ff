"""The process runtime's shell commands run for real on this host: start, alive, logs, stop (TERM then KILL)."""

from __future__ import annotations

import time

from labkit.nodes import LocalHost
from labkit.serve import NodeLaunch, ProcessRuntime


def test_process_lifecycle_kills_the_whole_group_even_when_term_is_ignored(local_env):
    rt, host = ProcessRuntime("labkit-rt-test", stop_grace=0.5), LocalHost()
    launch = NodeLaunch(
        "node a",
        0,
        ("sh", "-c", "trap '' TERM; echo \"$GREETING\"; sleep 60 & sleep 60"),
        (("GREETING", "it's me"),),
        True,
    )
    assert host.run(rt.start_command(launch, None, [])).ok
    time.sleep(0.3)
    assert host.run(rt.alive_command("node a")).stdout.strip() == "alive"
    assert len(local_env.processes()) >= 3  # wrapper shell + two sleeps, one process group
    second = host.run(rt.start_command(launch, None, []))
    assert second.exit_code == 17 and "already running" in second.stderr
    assert host.run(rt.logs_command("node a")).stdout == "it's me\n"
    assert host.run(rt.logs_command("node a", offset=3)).stdout == "s me\n"
    assert host.run(rt.leftovers_command()).stdout.startswith("process group ")
    t = time.monotonic()
    stop = host.run(rt.stop_command("node a"))
    assert stop.ok, stop.stderr
    assert time.monotonic() - t >= 0.5  # waited the grace period before KILL
    assert local_env.processes() == []
    assert host.run(rt.alive_command("node a")).stdout.strip() == "absent"
    assert host.run(rt.leftovers_command()).stdout == ""
    assert host.run(rt.stop_command("node a")).ok  # idempotent


def test_process_that_exits_is_dead_not_alive(local_env):
    rt, host = ProcessRuntime("labkit-rt-test2", stop_grace=0.5), LocalHost()
    assert host.run(rt.start_command(NodeLaunch("n", 0, ("sh", "-c", "exit 3"), (), True), None, [])).ok
    time.sleep(0.3)
    assert host.run(rt.alive_command("n")).stdout.strip() == "dead"
    assert host.run(rt.stop_command("n")).ok
    assert host.run(rt.alive_command("n")).stdout.strip() == "absent"
