"""`labkit doctor --bandwidth` as a real subprocess on two sshd nodes: with perftest's and nccl-tests' stand-ins
(tests/support/*_shim.py, in the real tools' output format) on the head only, the pair's ib_write_bw and the
lane's all_reduce_perf are reported absent naming the other node; with both tools on both nodes the pair's
figure is read from ib_write_bw's table. Without the flag doctor prints no bandwidth at all."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.lanes import SPARK_FABRIC, sim_recipe
from tests.support.nodes import NODE_NAMES
from tests.support.serving import labkit_cli

IMAGE = "labkit/sim:shim"  # sim_recipe's image for a docker lane


def ib_calls(fake, addr: str) -> list[list[str]]:
    f = Path(fake.shim_state) / NODE_NAMES[addr] / "ib_write_bw.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def doctor(fake, tmp_path, *args: str, count: int = 2) -> tuple[int, str, str]:
    folder = tmp_path / "lane"
    sim_recipe(
        folder, 18381, nodes=fake.addresses[:count], runtime="docker", ssh_port=fake.port, user=fake.user,
        extra=SPARK_FABRIC,
    )  # fmt: skip
    env = {**fake.cli_env(), "LABKIT_CACHE": str(tmp_path / "cache")}  # where the fabric figure is kept
    proc = labkit_cli("doctor", str(folder), *args, env=env)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def test_bandwidth_reports_a_tool_absent_on_one_node_by_name(nodes, tmp_path):
    head, other = nodes.addresses[:2]
    nodes.hide_tool(other, "ib_write_bw")
    nodes.hide_tool(other, "all_reduce_perf")
    code, out, err = doctor(nodes, tmp_path, "--bandwidth", "--json")
    assert code == 0, out + err
    got = {(m["pair"], m["tool"]): m for m in json.loads(out)["bandwidth"]}
    pair = f"{head}-{other}"
    assert got[(pair, "ib_write_bw")] == {
        "pair": pair,
        "tool": "ib_write_bw",
        "figure": None,
        "unit": "",
        "line": f"absent: ib_write_bw is not on the PATH of {other} or in {IMAGE}",
        "where": "",
    }
    assert got[(pair, "all_reduce_perf")]["line"] == f"absent: all_reduce_perf is not on the PATH of {other}"
    assert ib_calls(nodes, head) == ib_calls(nodes, other) == []  # nothing run where a side lacks the tool


def test_bandwidth_reads_ib_write_bw_between_the_pair_and_prints_a_table(nodes, tmp_path):
    head, other = nodes.addresses[:2]
    code, out, err = doctor(nodes, tmp_path, "--bandwidth")
    assert code == 0, out + err
    table = out.split("pair")[-1]
    assert f"{head}-{other}" in table and "96.48 Gb/s" in table
    # no mpirun on the nodes: the lane's all_reduce_perf cannot span them, and says so
    assert f"absent: mpirun is not on the PATH of {head}" in table
    # the server on the other node, the client on the head aimed at the other node's cx7 address (ip shim)
    server = ["-d", "rocep1s0f1", "-F", "--report_gbits", "-D", "5"]
    assert ib_calls(nodes, other) == [server]
    assert ib_calls(nodes, head) == [[*server, "10.10.0.6"]]
    argv = [c for c in nodes.calls(head)]  # the docker shim's log: the measurement started no container
    assert not [c for c in argv if c[:2] == ["run", "-d"]]
    # the roofline's fabric term takes the slowest pair's figure, kept for these nodes (96.48 Gb/s = 12.06 GB/s)
    assert "fabric for the roofline: 12.1 GB/s measured by labkit doctor --bandwidth " in err
    kept = json.loads(next((tmp_path / "cache" / "probes").glob("fabric-*.json")).read_text())
    assert kept["bytes_per_s"] == 96.48e9 / 8 and "ib_write_bw, the slowest pair" in kept["source"]
    code, plain, err = doctor(nodes, tmp_path, "--json")
    assert code == 0 and "bandwidth" not in json.loads(plain), plain + err


def test_bandwidth_on_one_node_reads_all_reduce_perf_without_mpirun(nodes, tmp_path):
    code, out, err = doctor(nodes, tmp_path, "--bandwidth", "--json", count=1)
    assert code == 0, out + err
    assert json.loads(out)["bandwidth"] == [
        {
            "pair": nodes.addresses[0],
            "tool": "all_reduce_perf",
            "figure": 21.3456,
            "unit": "GB/s",
            "line": "# Avg bus bandwidth    : 21.3456",
            "where": "node",
        }
    ]


def test_a_failing_server_is_reported_with_its_node(nodes, tmp_path):
    head, other = nodes.addresses[:2]
    broken = nodes.tool_dir(other) / "ib_write_bw"
    broken.write_text("#!/bin/sh\necho 'Unable to find the Infiniband/RoCE device' >&2\nexit 1\n")
    nodes.tool_dir(head).joinpath("ib_write_bw").write_text(
        '#!/bin/sh\necho "Couldn\'t connect" >&2\nexit 1\n'
    )
    code, out, err = doctor(nodes, tmp_path, "--bandwidth", "--json")
    assert code == 0, out + err
    got = {m["tool"]: m for m in json.loads(out)["bandwidth"]}
    assert got["ib_write_bw"]["figure"] is None
    assert got["ib_write_bw"]["line"] == (
        f"failed: server on {other}: Unable to find the Infiniband/RoCE device"
    )


def tool_runs(fake, addr: str) -> list[list[str]]:
    """The `docker run --rm` calls of the node's shim that ran a fabric tool (not the engine, not a --help)."""
    return [c for c in fake.calls(addr) if c[:2] == ["run", "--rm"] and "labkit.tool" in " ".join(c)]


def test_tools_only_in_the_image_run_in_a_container_with_the_lanes_host_access(nodes, tmp_path):
    """Neither node has perftest on its PATH, both have it in the image: the pair is measured inside two
    `docker run --rm` containers (server and client), each with the engine's network, IPC, GPU and RoCE access,
    and the result says it ran from the image."""
    head, other = nodes.addresses[:2]
    for addr in (head, other):
        nodes.image_tool(addr, "ib_write_bw")
    code, out, err = doctor(nodes, tmp_path, "--bandwidth", "--json")
    assert code == 0, out + err
    got = {m["tool"]: m for m in json.loads(out)["bandwidth"]}
    assert (got["ib_write_bw"]["figure"], got["ib_write_bw"]["where"]) == (96.48, "image")
    server = ["-d", "rocep1s0f1", "-F", "--report_gbits", "-D", "5"]
    assert ib_calls(nodes, other) == [server] and ib_calls(nodes, head) == [[*server, "10.10.0.6"]]
    served = [c for c in tool_runs(nodes, other) if "ib_write_bw" in c]
    client = [c for c in tool_runs(nodes, head) if "ib_write_bw" in c]
    assert len(served) == len(client) == 1
    for argv in (served[0], client[0]):
        image_at = argv.index(IMAGE)
        options = argv[:image_at]
        assert options[:4] == ["run", "--rm", "--pull", "never"]
        assert {"--network", "--ipc", "--device", "--cap-add"} <= set(
            options
        ) and "/dev/infiniband" in options
    assert served[0][served[0].index(IMAGE) + 1 :][:3] == ["timeout", "35", "ib_write_bw"]
    assert nodes.containers(head) == nodes.containers(other) == []  # every tool container was --rm
    code, table, err = doctor(nodes, tmp_path, "--bandwidth")
    assert code == 0 and "image" in table.split("ran from")[-1], table + err


def test_all_reduce_only_in_the_image_of_a_multi_node_lane_is_not_run_and_says_why(nodes, tmp_path):
    """mpirun on the head starts its ranks on the nodes themselves, outside any container: a tool that only the
    image has cannot be one of them, and doctor says so instead of starting it."""
    head, other = nodes.addresses[:2]
    for addr in (head, other):
        nodes.image_tool(addr, "all_reduce_perf")
    code, out, err = doctor(nodes, tmp_path, "--bandwidth", "--json")
    assert code == 0, out + err
    got = {m["tool"]: m for m in json.loads(out)["bandwidth"]}
    line = got["all_reduce_perf"]["line"]
    assert got["all_reduce_perf"]["figure"] is None and line.startswith("not run: all_reduce_perf is only in")
    assert f"{IMAGE} on {head}, {other}" in line
    assert not [c for node in (head, other) for c in tool_runs(nodes, node) if "all_reduce_perf" in c]


def test_all_reduce_in_the_image_of_a_one_node_lane_runs_there(nodes, tmp_path):
    nodes.image_tool(nodes.addresses[0], "all_reduce_perf")
    code, out, err = doctor(nodes, tmp_path, "--bandwidth", "--json", count=1)
    assert code == 0, out + err
    [m] = json.loads(out)["bandwidth"]
    assert (m["figure"], m["where"]) == (21.3456, "image")
    [run] = [c for c in tool_runs(nodes, nodes.addresses[0]) if "all_reduce_perf" in c]
    assert run[run.index(IMAGE) + 1 :] == ["all_reduce_perf", "-b", "8M", "-e", "1G", "-f", "2", "-g", "1"]
