"""Serving the simulator for real: locally (process runtime) and on four sshd nodes (docker runtime via the shim).

Every failure test ends with the same check: a clear error, and nothing of the lane left on any node.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from labkit.errors import NodeError
from labkit.serve import Lane
from labkit.serve.errors import BootError, BootTimeout, LaneBusy, LaneFailed
from labkit.store import RunFolderSink
from tests.support.lanes import chat, sim_recipe
from tests.support.serving import assert_clean_cluster, cluster_lane, labkit_cli, served_plan

CRASH_LINE = "Installed InstantTensor does not expose the metadata layout this loader needs (simulated)"


def local_lane(tmp_path, port, **kw):
    plan = served_plan(sim_recipe(tmp_path / kw.pop("name", "lane-local"), port, **kw))
    return Lane(plan, sink=RunFolderSink(tmp_path / "run"), poll=0.1, stop_grace=3)


def assert_clean_local(lane: Lane, local_env) -> None:
    assert lane.status() == {"localhost": "absent"}
    assert lane.leftovers() == {}
    assert local_env.processes() == []


# ---------------------------------------------------------------------------------------------- local


def test_local_sim_boots_records_facts_and_cleans_up(tmp_path, local_env):
    lane = local_lane(tmp_path, 18301)
    with lane.up() as ep:
        assert ep.base_url == "http://127.0.0.1:18301/v1" and ep.model == "sim-test"
        assert chat(ep.base_url, ep.model)["usage"]["completion_tokens"] == 8
        assert lane.status() == {"localhost": "alive"}
        assert len(local_env.processes()) == 1
        b = ep.boot
        assert b.kv_pool_tokens == 100_000 and b.kv_pool_context == 8192
        assert b.engine_version and "labkit.sim" in b.engine_version
        assert b.max_concurrency is not None and b.load_seconds is not None
        assert 0 < b.boot_seconds < 20
        assert "Application startup complete" in b.lines["ready"]
        assert [p.name for p in b.phases][0] == "version"
    assert_clean_local(lane, local_env)
    log = (tmp_path / "run" / "logs" / "localhost.log").read_text()
    assert "GPU KV cache size: 100,000 tokens" in log and "Application startup complete" in log
    assert '"kv_pool_tokens": 100000' in (tmp_path / "run" / "boot.json").read_text()


def test_local_sglang_flavor_waits_for_warmup(tmp_path, local_env):
    lane = local_lane(tmp_path, 18302, flavor="sglang", settings={"sglang_warmup_s": 1.0})
    with lane.up() as ep:
        assert "ready to roll" in ep.boot.lines["ready"]
        assert ep.boot.kv_pool_tokens == 100_000
    assert_clean_local(lane, local_env)


def test_local_boot_crash_names_the_fatal_line(tmp_path, local_env):
    lane = local_lane(tmp_path, 18303, settings={"fault_boot_crash": CRASH_LINE})
    t = time.monotonic()
    with pytest.raises(BootError) as e, lane.up():
        pytest.fail("must not get here")
    assert time.monotonic() - t < 15
    msg = str(e.value)
    assert "localhost" in msg and "InstantTensor" in msg and CRASH_LINE in msg
    assert "last lines of localhost's log" in msg
    assert_clean_local(lane, local_env)


def test_local_boot_timeout(tmp_path, local_env):
    lane = local_lane(tmp_path, 18304, boot_timeout=2, settings={"boot_weights_s": 60})
    with pytest.raises(BootTimeout, match=r"not ready after 2 s \(engine.boot_timeout\)"), lane.up():
        pass
    assert_clean_local(lane, local_env)


def test_local_crash_mid_run_is_reported_with_log_tail(tmp_path, local_env):
    lane = local_lane(tmp_path, 18305, settings={"fault_exit_request": 2, "fault_exit_after_tokens": 3})
    with pytest.raises(LaneFailed) as e, lane.up() as ep:
        chat(ep.base_url, ep.model)
        chat(ep.base_url, ep.model)  # the engine exits mid-stream
    assert "engine died on localhost" in str(e.value) and "simulated fault" in str(e.value)
    assert_clean_local(lane, local_env)


def test_second_start_refuses_and_changes_nothing(tmp_path, local_env):
    lane = local_lane(tmp_path, 18306)
    lane.start()
    try:
        again = Lane(lane.plan, progress=None)
        with pytest.raises(LaneBusy, match="already has something on localhost"):
            again.start()
        assert lane.status() == {"localhost": "alive"} and lane.ready()
    finally:
        lane.down()
    assert_clean_local(lane, local_env)


def test_down_names_both_a_failed_stop_and_what_it_left(tmp_path, local_env):
    lane = local_lane(tmp_path, 18310)
    lane.start()
    host = lane.group.head
    run = host.run
    stop = lane.runtime.stop_command(host.name)
    # the node's stop command fails without stopping anything (a hung daemon, a permission problem ...)
    host.run = lambda cmd, **kw: run(
        "echo 'simulated: cannot stop' >&2; exit 1" if cmd == stop else cmd, **kw
    )
    try:
        with pytest.raises(NodeError) as e:
            lane.down()
        reason = e.value.failures["localhost"]
        assert "simulated: cannot stop" in reason and "; left: " in reason, reason
        assert reason.split("; left: ")[1] == lane.leftovers()["localhost"], reason
    finally:
        del host.run
        lane.down()
    assert_clean_local(lane, local_env)


def interrupt_during_boot(proc: subprocess.Popen, sig: int) -> tuple[int, str]:
    """Send `sig` once the CLI reports it is waiting for readiness; return (exit code, stderr)."""
    lines: list[str] = []
    waiting = threading.Event()

    def read():
        for line in proc.stderr:
            lines.append(line)
            if "waiting for readiness" in line:
                waiting.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert waiting.wait(30), "".join(lines)
    time.sleep(0.5)
    proc.send_signal(sig)
    proc.wait(60)
    reader.join(10)
    return proc.returncode, "".join(lines)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_local_interrupt_during_boot_removes_everything(tmp_path, local_env, sig):
    plan = sim_recipe(tmp_path / "lane-int", 18307, settings={"boot_weights_s": 60})
    proc = labkit_cli("up", str(tmp_path / "lane-int"), "--logs", str(tmp_path / "run"))
    code, err = interrupt_during_boot(proc, sig)
    assert code == 130, err
    assert "interrupted" in err
    lane = Lane(plan, progress=None)
    assert_clean_local(lane, local_env)


def test_cli_up_status_logs_down_across_invocations_local(tmp_path, local_env):
    sim_recipe(tmp_path / "lane-cli", 18308)
    folder = str(tmp_path / "lane-cli")
    up = labkit_cli("up", folder, "--logs", str(tmp_path / "run"))
    out, err = up.communicate(timeout=60)
    assert up.returncode == 0, err
    assert "is up: http://127.0.0.1:18308/v1" in out
    try:
        st = labkit_cli("status", folder)
        out, _ = st.communicate(timeout=30)
        assert st.returncode == 0 and "localhost: alive" in out and "ready at" in out
        lg = labkit_cli("logs", folder, "--tail", "3")
        out, _ = lg.communicate(timeout=30)
        assert lg.returncode == 0 and "Application startup complete" in out
    finally:
        dn = labkit_cli("down", folder)
        out, err = dn.communicate(timeout=60)
    assert dn.returncode == 0, err
    assert "removed on 1 node(s)" in out
    st = labkit_cli("status", folder)
    out, _ = st.communicate(timeout=30)
    assert st.returncode == 3 and "localhost: absent" in out and ": down" in out
    assert local_env.processes() == []


# ---------------------------------------------------------------------------------------------- four sshd nodes


def test_cluster_sim_boots_on_four_nodes_and_cleans_up(cluster, tmp_path):
    cluster.clear_calls()
    lane = cluster_lane(cluster, tmp_path, 18311)
    try:
        with lane.up() as ep:
            assert ep.base_url == "http://127.0.0.2:18311/v1"
            assert chat(ep.base_url, ep.model)["usage"]["completion_tokens"] == 8
            assert set(lane.status().values()) == {"alive"}
            assert len(cluster.processes()) == 4  # one simulator "container" per node
            assert ep.boot.kv_pool_tokens == 100_000 and ep.boot.boot_seconds > 0
            for addr in cluster.addresses:
                assert cluster.containers(addr) == [f"{lane.lane_id}-{addr}"]
        assert_clean_cluster(lane, cluster)
    finally:
        lane.close()
    for i, addr in enumerate(cluster.addresses):
        runs = [c for c in cluster.calls(addr) if c[0] == "run"]
        assert len(runs) == 1
        run = runs[0]
        assert run[:5] == ["run", "-d", "--name", f"{lane.lane_id}-{addr}", "--label"]
        assert f"labkit.lane={lane.lane_id}" in run
        for flag, value in [("--network", "host"), ("--ipc", "host"), ("--gpus", "all")]:
            assert run[run.index(flag) + 1] == value
        image = run.index("labkit/sim:shim")
        assert run[image + 1 : image + 6] == ["python3", "-m", "labkit.sim", "--host", addr]
        assert ["rm", "-f", f"{lane.lane_id}-{addr}"] in cluster.calls(addr)
        log = (tmp_path / "run" / "logs" / f"{addr}.log").read_text()
        assert "Application startup complete" in log, f"node {i}"


def test_cluster_one_node_unreachable_starts_nothing(cluster, tmp_path):
    cluster.clear_calls()
    nodes = ["127.0.0.2", "127.0.0.3", "127.0.0.9", "127.0.0.4"]
    lane = cluster_lane(cluster, tmp_path, 18312, nodes=nodes)
    try:
        with pytest.raises(NodeError) as e, lane.up():
            pytest.fail("must not boot")
    finally:
        lane.close()
    assert list(e.value.failures) == ["127.0.0.9"]
    assert "nothing was started" in str(e.value)
    for addr in cluster.addresses:
        assert cluster.calls(addr) == []
    assert cluster.processes() == []


def test_cluster_engine_crash_at_boot(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18313, settings={"fault_boot_crash": CRASH_LINE})
    try:
        with pytest.raises(BootError) as e, lane.up():
            pytest.fail("must not boot")
        assert "InstantTensor" in str(e.value) and e.value.node in cluster.addresses
        assert CRASH_LINE in e.value.log_tail
        assert_clean_cluster(lane, cluster)
    finally:
        lane.close()


def test_cluster_worker_dies_mid_run(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18314)
    try:
        with pytest.raises(LaneFailed) as e, lane.up():
            import json

            rec = json.loads(
                (cluster.shim_state / "dgx7" / "containers" / f"{lane.lane_id}-127.0.0.4.json").read_text()
            )
            os.kill(rec["pid"], signal.SIGKILL)  # a worker's engine dies while the lane is in use
            time.sleep(0.3)
            lane.check()
        assert "engine died on 127.0.0.4" in str(e.value)
        assert_clean_cluster(lane, cluster)
    finally:
        lane.close()


def test_cluster_boot_timeout(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18315, boot_timeout=2, settings={"boot_weights_s": 60})
    try:
        with pytest.raises(BootTimeout), lane.up():
            pass
        assert_clean_cluster(lane, cluster)
    finally:
        lane.close()


def test_cluster_ctrl_c_during_boot_and_cli_lifecycle(cluster, tmp_path):
    folder = tmp_path / "lane-4x-cli"
    plan = sim_recipe(
        folder,
        18316,
        nodes=cluster.addresses,
        runtime="docker",
        ssh_port=cluster.port,
        user=cluster.user,
        settings={"boot_weights_s": 60},
    )
    code, err = interrupt_during_boot(labkit_cli("up", str(folder), env=cluster.cli_env()), signal.SIGINT)
    assert code == 130, err
    lane = Lane(plan, ssh=cluster.ssh_options(), progress=None)
    assert_clean_cluster(lane, cluster)

    sim_recipe(
        folder, 18316, nodes=cluster.addresses, runtime="docker", ssh_port=cluster.port, user=cluster.user
    )
    up = labkit_cli("up", str(folder), env=cluster.cli_env())
    out, err = up.communicate(timeout=60)
    assert up.returncode == 0, err
    try:
        st = labkit_cli("status", str(folder), env=cluster.cli_env())
        out, _ = st.communicate(timeout=30)
        assert st.returncode == 0 and out.count(": alive") == 4
        lg = labkit_cli("logs", str(folder), "--tail", "2", "--node", "127.0.0.5", env=cluster.cli_env())
        out, _ = lg.communicate(timeout=30)
        assert "Application startup complete" in out
    finally:
        dn = labkit_cli("down", str(folder), env=cluster.cli_env())
        out, err = dn.communicate(timeout=60)
    assert dn.returncode == 0, err
    assert_clean_cluster(lane, cluster)
    lane.close()


def test_follow_streams_new_log_lines(tmp_path, local_env):
    import io

    lane = local_lane(tmp_path, 18309)
    with lane.up() as ep:
        out, stop = io.StringIO(), threading.Event()
        t = threading.Thread(target=lane.follow, args=(out,), kwargs={"interval": 0.1, "stop": stop})
        t.start()
        time.sleep(0.5)
        chat(ep.base_url, ep.model)
        time.sleep(0.5)
        stop.set()
        t.join(10)
    text = out.getvalue()
    assert text.startswith("INFO") and "Application startup complete" in text
    assert_clean_local(lane, local_env)


def test_cluster_one_worker_crashes_at_boot_is_named(cluster, tmp_path):
    cluster.break_node("127.0.0.4", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    lane = cluster_lane(cluster, tmp_path, 18317, settings={"boot_weights_s": 5})
    try:
        with pytest.raises(BootError) as e, lane.up():
            pytest.fail("must not boot")
        assert e.value.node == "127.0.0.4"
        assert "CUDA out of memory" in str(e.value)
        assert_clean_cluster(lane, cluster)
    finally:
        cluster.break_node("127.0.0.4", None)
        lane.close()


def test_cluster_process_runtime_over_ssh(cluster, tmp_path):
    cluster.clear_calls()
    lane = cluster_lane(cluster, tmp_path, 18318, runtime="process", name="lane-4x-proc")
    try:
        with lane.up() as ep:
            assert chat(ep.base_url, ep.model)["usage"]["completion_tokens"] == 8
            assert len(cluster.processes()) == 4
            for addr in cluster.addresses:
                assert all(c[0] != "run" for c in cluster.calls(addr))  # no docker involved
        assert_clean_cluster(lane, cluster)
    finally:
        lane.close()


def test_a_labkit_built_model_not_yet_built_is_refused_before_any_node_is_touched(local_env):
    """serve never builds models: a plan naming one without model.path says who builds it, and starts nothing."""
    from labkit.errors import LabkitError
    from labkit.recipe.lookup import load_plan

    lane = Lane(load_plan("tiny-llamacpp"), progress=None)
    with pytest.raises(LabkitError, match="is a model labkit builds; build it before the lane starts"):
        lane.start()
    assert lane.status() == {"localhost": "absent"} and local_env.processes() == []
