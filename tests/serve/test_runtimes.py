"""The process runtime's shell commands run for real on this host: start, alive, logs, stop (TERM then KILL)."""

from __future__ import annotations

import time
from pathlib import Path

from labkit.nodes.local import LocalHost
from labkit.serve.engines import NodeLaunch
from labkit.serve.runtimes import ProcessRuntime


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


def _group_and_session(pid: int) -> tuple[int, int]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[2]), int(fields[3])  # pgrp, session


def _start_sleeper(rt, host):
    launch = NodeLaunch("n", 0, ("sleep", "60"), (), True)
    r = host.run(rt.start_command(launch, None, []))
    assert r.ok, r.stderr
    return int(r.stdout.strip())


def test_engine_gets_its_own_group_in_the_callers_session(local_env):
    """Its own process group (one kill reaches all of it) but not its own session: a new session is a new
    scheduler autogroup, which starved vLLM CPU's API server against a client in another session."""
    import os

    rt, host = ProcessRuntime("labkit-rt-group", stop_grace=0.5), LocalHost()
    pid = _start_sleeper(rt, host)
    try:
        assert _group_and_session(pid) == (pid, os.getsid(0))
        assert Path(f"/proc/{pid}/cmdline").read_text().split("\0")[0] == "sleep"  # perl exec'd the engine
    finally:
        assert host.run(rt.stop_command("n")).ok
    assert local_env.processes() == []


def test_without_perl_the_engine_gets_its_own_session(local_env, tmp_path, monkeypatch):
    """The fallback where perl is missing: setsid (a new session), still one group and a correct pid file."""
    import os
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for tool in os.listdir(d) if os.path.isdir(d) else ():
            if not tool.startswith("perl") and not (bin_dir / tool).exists() and shutil.which(tool, path=d):
                (bin_dir / tool).symlink_to(os.path.join(d, tool))
    rt, host = ProcessRuntime("labkit-rt-noperl", stop_grace=0.5), LocalHost()
    monkeypatch.setenv("PATH", str(bin_dir))
    pid = _start_sleeper(rt, host)
    try:
        assert _group_and_session(pid) == (pid, pid)
    finally:
        assert host.run(rt.stop_command("n")).ok
    assert local_env.processes() == []
