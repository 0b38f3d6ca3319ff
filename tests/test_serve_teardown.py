"""Teardown cannot be skipped: whatever fails or interrupts on the way out, nothing of the lane is left on any node.

Real parts as in test_serve.py (sshd nodes + docker shim, the simulator); a real SIGINT is sent to this process
at the exact step under test by wrapping that step (the fault injection), everything else runs unchanged.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

import pytest

from labkit.serve import Lane
from tests.lanes import sim_recipe
from tests.nodes import NODE_NAMES
from tests.test_serve import assert_clean_cluster, cluster_lane


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


def remove_leftovers(lane: Lane) -> None:
    """After a test that failed before the fix: take away whatever it left, so later tests start clean."""
    for injected in ("_capture_logs", "_dead_node_report", "_start_all", "status"):
        vars(lane).pop(injected, None)
    with_logs = lane.run_dir
    lane.run_dir = None
    try:
        lane.down()
    finally:
        lane.run_dir = with_logs


def test_unwritable_log_file_does_not_skip_removal(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18331, name="lane-badlog")
    try:
        with lane.up():
            head = lane.group.head.name
            engine_prints(cluster, lane, head, "INFO a line printed after readiness\n")  # fetched at teardown
            log = tmp_path / "run" / "logs" / f"{head}.log"
            log.unlink()
            log.mkdir()  # writing the rest of the log now fails (IsADirectoryError), as on a broken run folder
        assert_clean_cluster(lane, cluster)
    finally:
        remove_leftovers(lane)
        lane.close()


def test_ctrl_c_while_logs_are_captured_still_removes_everything(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18332, name="lane-int-capture")
    try:
        try:
            with lane.up():
                lane._capture_logs = sigint_first(lane._capture_logs)
        except KeyboardInterrupt:
            pass  # before the fix the interrupt escaped here, ahead of any removal
        assert_clean_cluster(lane, cluster)
    finally:
        remove_leftovers(lane)
        lane.close()


def test_interrupt_raised_inside_log_capture_still_removes_everything(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18333, name="lane-raise-capture")

    def capture_then_interrupt():
        raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt), lane.up():
            lane._capture_logs = capture_then_interrupt
        assert_clean_cluster(lane, cluster)
    finally:
        remove_leftovers(lane)
        lane.close()


def test_ctrl_c_during_dead_node_report_still_removes_everything(cluster, tmp_path):
    lane = cluster_lane(cluster, tmp_path, 18334, name="lane-int-report")
    try:
        try:
            with pytest.raises(RuntimeError, match="client gave up"), lane.up():
                lane._dead_node_report = sigint_first(lane._dead_node_report)
                raise RuntimeError("client gave up")
        except KeyboardInterrupt:
            pass  # before the fix the interrupt escaped here, ahead of any removal
        assert_clean_cluster(lane, cluster)
    finally:
        remove_leftovers(lane)
        lane.close()


def test_no_dead_node_report_after_ctrl_c(tmp_path, local_env):
    """Ctrl-C inside the block goes straight to removal: no status/log round trips first, no LaneFailed."""
    plan = sim_recipe(tmp_path / "lane-kbint", 18335)
    lane = Lane(plan, run_dir=tmp_path / "run", poll=0.1, stop_grace=3)
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
    lane.run_dir.mkdir(parents=True, exist_ok=True)
    real_start_all = lane._start_all

    def start_then_break_folder():
        real_start_all()
        shutil.rmtree(lane.run_dir / "logs")
        (lane.run_dir / "logs").write_text("not a folder")

    lane._start_all = start_then_break_folder
    try:
        with pytest.raises(OSError), lane.up():
            pytest.fail("must not boot")
        assert_clean_cluster(lane, cluster)
    finally:
        remove_leftovers(lane)
        lane.close()
