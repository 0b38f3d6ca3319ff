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


def ib_calls(fake, addr: str) -> list[list[str]]:
    f = Path(fake.shim_state) / NODE_NAMES[addr] / "ib_write_bw.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def doctor(fake, tmp_path, *args: str, count: int = 2) -> tuple[int, str, str]:
    folder = tmp_path / "lane"
    sim_recipe(
        folder, 18381, nodes=fake.addresses[:count], runtime="docker", ssh_port=fake.port, user=fake.user,
        extra=SPARK_FABRIC,
    )  # fmt: skip
    proc = labkit_cli("doctor", str(folder), *args, env=fake.cli_env())
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
        "line": f"absent: ib_write_bw is not on the PATH of {other}",
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
