"""The `doctor --bandwidth` builders and parsers (labkit.serve.bandwidth): text in, figures out, every shell
argument quoted, and a garbled report refused with a message saying what was missing."""

from __future__ import annotations

import dataclasses

import pytest

from labkit.errors import LabkitError
from labkit.recipe.lookup import load_plan
from labkit.serve.bandwidth import (
    ALL_REDUCE,
    IB_WRITE_BW,
    IMAGE_MARK,
    absent,
    all_reduce_argv,
    ib_client_argv,
    ib_client_command,
    ib_server_argv,
    ib_server_command,
    measured,
    parse_all_reduce,
    parse_ib_write_bw,
    parse_which,
    which_command,
)
from labkit.serve.bandwidth_run import rank_env
from labkit.serve.fabric import fabric_env
from labkit.serve.runtimes import DockerRuntime, runtime_for
from tests.support.all_reduce_perf_shim import REPORT as ALL_REDUCE_REPORT
from tests.support.ib_write_bw_shim import REPORT as IB_REPORT

ROW = " 65536      10000           96.52              96.48              0.184016"


def test_ib_write_bw_commands_match_the_perftest_form_and_quote_every_argument():
    assert ib_server_argv("rocep1s0f1") == [
        "ib_write_bw",
        "-d",
        "rocep1s0f1",
        "-F",
        "--report_gbits",
        "-D",
        "5",
    ]
    assert ib_client_argv("rocep1s0f1", "10.0.0.2")[-1] == "10.0.0.2"
    assert ib_server_command("x y", limit=30) == "timeout 30 ib_write_bw -d 'x y' -F --report_gbits -D 5"
    assert "ib_write_bw -d rocep1s0f1 -F --report_gbits -D 5 '10.0.0.2;rm'" in ib_client_command(
        "rocep1s0f1", "10.0.0.2;rm"
    )


def test_all_reduce_runs_under_mpirun_over_the_lane_when_mpirun_exists():
    test = ["all_reduce_perf", "-b", "8M", "-e", "1G", "-f", "2", "-g", "1"]
    assert all_reduce_argv([], mpirun=False) == test
    assert all_reduce_argv(["10.0.0.1", "10.0.0.2"], mpirun=True) == [
        "mpirun", "-np", "2", "-H", "10.0.0.1:1,10.0.0.2:1", *test
    ]  # fmt: skip
    argv = all_reduce_argv(["10.0.0.1", "10.0.0.2"], True, {"NCCL_IB_HCA": "a,b", "NCCL_NET": "IB"}, "enp1")
    assert argv == [
        "mpirun", "-np", "2", "-H", "10.0.0.1:1,10.0.0.2:1",
        "--mca", "btl_tcp_if_include", "enp1", "--mca", "oob_tcp_if_include", "enp1",
        "-x", "NCCL_IB_HCA=a,b", "-x", "NCCL_NET=IB", *test,
    ]  # fmt: skip


def test_every_rank_gets_the_lanes_fabric_env_but_no_other_nodes_interface(tmp_path):
    """mpirun's -x gives each rank one value: the lane's NCCL set goes to all of them, while a variable whose
    value differs per node (a ring cabled on different ports) is left to each rank."""
    plan = load_plan("dsv41")
    names = list(plan.cluster.nodes)
    env, iface = rank_env(plan, names)
    assert env == fabric_env(plan, names[0]) and iface == "enp1s0f1np1"
    assert env["NCCL_NET"] == "IB" and env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
    ring = dataclasses.replace(
        plan.cluster.fabric, topology="ring", interfaces=((names[1], "enP2p1s0f1np1"),)
    )
    ring_plan = dataclasses.replace(plan, cluster=dataclasses.replace(plan.cluster, fabric=ring))
    env, iface = rank_env(ring_plan, names)
    assert iface is None and "NCCL_SOCKET_IFNAME" not in env and "UCX_NET_DEVICES" not in env
    assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1" and env["NCCL_NET_PLUGIN"] == "none"


def test_ib_write_bw_table_gives_the_average_gbits():
    assert parse_ib_write_bw(IB_REPORT.format(device="rocep1s0f1")) == (96.48, ROW.strip())


def test_all_reduce_report_gives_the_average_bus_bandwidth():
    assert parse_all_reduce(ALL_REDUCE_REPORT) == (21.3456, "# Avg bus bandwidth    : 21.3456")


@pytest.mark.parametrize(
    "text, said",
    [
        ("Couldn't connect to 10.0.0.2:18515\n", "no '#bytes #iterations"),
        (
            IB_REPORT.replace(ROW, " 65536  10000  96.52  n/a  0.18"),
            "not 5 numbers: '65536  10000  96.52  n/a",
        ),
        (IB_REPORT.split(ROW)[0], "no row of figures"),
    ],
)
def test_a_garbled_ib_write_bw_table_is_refused_saying_what_is_wrong(text, said):
    with pytest.raises(LabkitError, match="ib_write_bw") as e:
        parse_ib_write_bw(text)
    assert said in str(e.value)
    assert measured("a-b", IB_WRITE_BW, True, text).figure is None
    assert measured("a-b", IB_WRITE_BW, True, text).line.startswith("unreadable: ib_write_bw")


def test_a_report_without_the_avg_bus_line_is_refused():
    with pytest.raises(LabkitError, match="Avg bus bandwidth"):
        parse_all_reduce(ALL_REDUCE_REPORT.replace("# Avg bus bandwidth    : 21.3456\n", ""))


def test_results_of_a_failed_run_and_an_absent_tool_say_why():
    failed = measured("a-b", ALL_REDUCE, False, "", "some warning\nNCCL error: unhandled system error\n")
    assert (failed.figure, failed.line) == (None, "failed: NCCL error: unhandled system error")
    gone = absent("a-b", IB_WRITE_BW, ["dgx6"])
    assert gone.figure is None and gone.line == "absent: ib_write_bw is not on the PATH of dgx6"
    assert parse_which("ib_write_bw /usr/bin/ib_write_bw\nmpirun /usr/bin/mpirun\n") == {
        "ib_write_bw": "node",
        "mpirun": "node",
    }
    in_image = absent("a-b", ALL_REDUCE, ["dgx6"], "vllm-node:tf5")
    assert in_image.line == "absent: all_reduce_perf is not on the PATH of dgx6 or in vllm-node:tf5"


def test_the_image_is_asked_after_the_node_and_the_nodes_own_copy_wins():
    prefix = ["docker", "run", "--rm", "--pull", "never", "img:1"]
    command = which_command(prefix)
    node_part, _, image_part = command.partition(f"echo {IMAGE_MARK}")
    assert node_part.startswith(which_command()) and "docker run" not in node_part
    # the image's question is one quoted `sh -c` argument, its errors (no such image) kept out of the answer
    assert image_part.strip().startswith("; docker run --rm --pull never img:1 sh -c 'p=$(command -v")
    assert "2>/dev/null" in image_part
    stdout = f"mpirun /usr/bin/mpirun\n{IMAGE_MARK}\nmpirun /opt/mpirun\nall_reduce_perf /opt/nccl-tests/x\n"
    assert parse_which(stdout) == {"mpirun": "node", "all_reduce_perf": "image"}


def test_a_tool_in_the_image_runs_inside_a_container_and_the_server_ends_with_it():
    prefix = ("docker", "run", "--rm", "--label", "labkit.tool=l 1", "img")
    server = ib_server_command("rocep1s0f1", limit=30, prefix=prefix)
    # timeout runs inside the container, so the container ends when the server does
    assert server.startswith(
        "docker run --rm --label 'labkit.tool=l 1' img timeout 30 ib_write_bw -d rocep1s0f1"
    )
    client = ib_client_command("rocep1s0f1", "10.0.0.2", prefix=prefix)
    assert "do docker run --rm --label 'labkit.tool=l 1' img ib_write_bw -d rocep1s0f1 -F" in client


def test_the_tool_container_gets_the_engines_host_access_and_never_pulls(tmp_path):
    plan = load_plan("dsv41")
    runtime = runtime_for(plan)
    assert isinstance(runtime, DockerRuntime)
    prefix = runtime.tool_prefix(plan.engine.image)
    assert prefix[:5] == ["docker", "run", "--rm", "--pull", "never"] and prefix[-1] == plan.engine.image
    assert f"labkit.tool={plan.lane_id}" in prefix
    access = runtime.host_access()
    assert prefix[-1 - len(access) : -1] == access
    assert {"--network", "--ipc", "--gpus", "--device"} <= set(access) and "/dev/infiniband" in access
