"""The fabric (`[cluster.fabric]`): engines rendezvous on fabric addresses (from the recipe, else detected at
boot on every node), the communication libraries get the interface, docker gets RoCE access and the compile
caches, and the client stays on the management name. Real sshd nodes with an `ip` shim for the detection."""

from __future__ import annotations

import dataclasses
import os
import subprocess

import pytest

from labkit.errors import LabkitError, NodeError
from labkit.recipe.lookup import load_plan
from labkit.serve import Lane, lane_commands
from labkit.serve.fabric import node_addresses, parse_address
from labkit.serve.plan import launches
from labkit.store import RunFolderSink
from tests.support.lanes import sim_recipe
from tests.support.serving import assert_clean_cluster, served_plan

FABRIC = {"dgx5": "10.0.0.5", "dgx6": "10.0.0.6", "dgx7": "10.0.0.7", "dgx8": "10.0.0.8"}


def with_addresses(plan, addresses=FABRIC, head_address=None):
    fabric = dataclasses.replace(plan.cluster.fabric, addresses=tuple(addresses.items()))
    cluster = dataclasses.replace(plan.cluster, fabric=fabric, head_address=head_address)
    return dataclasses.replace(plan, cluster=cluster)


def launch_env(plan):
    return {ln.node: (list(ln.argv), dict(ln.env)) for ln in launches(plan)}


def test_vllm_rendezvous_and_host_ip_use_fabric_addresses_and_the_client_stays_on_management():
    plan = with_addresses(load_plan("dsv41", spec="dspark"), head_address="dgx5.lab")
    per_node = launch_env(plan)
    for node, (argv, env) in per_node.items():
        assert env["VLLM_HOST_IP"] == FABRIC[node]
        assert argv[argv.index("--master-addr") + 1] == "10.0.0.5"  # the head's fabric address
        assert (
            env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "enp1s0f1np1"
        )
        assert env["UCX_NET_DEVICES"] == "enp1s0f1np1" and env["NCCL_IGNORE_CPU_AFFINITY"] == "1"
        assert env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1" and env["NCCL_IB_DISABLE"] == "0"
        assert env["NCCL_NET"] == "IB" and env["NCCL_CROSS_NIC"] == "1"  # a failed RoCE init fails the boot
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET"  # its transport lines
    lane = Lane(plan, progress=None)
    assert lane.root_url == "http://dgx5.lab:8000"  # head_address is the client's, not the rendezvous


def test_sglang_uses_fabric_addresses_and_turns_the_memory_balance_check_off():
    plan = with_addresses(load_plan("prod"))
    for node, (argv, env) in launch_env(plan).items():
        assert env["SGLANG_HOST_IP"] == FABRIC[node]
        assert argv[argv.index("--dist-init-addr") + 1] == "10.0.0.5:20000"
        assert env["SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"] == "0"
        assert env["SGLANG_CACHE_DIR"] == "/root/.cache/sglang"  # its mounted compile cache


def test_recipe_env_wins_over_derived_env_and_per_node_values_win_over_all():
    plan = with_addresses(load_plan("prod"))
    env = (
        ("GLOO_SOCKET_IFNAME", "eth9"),
        ("SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK", "1"),
        ("SGLANG_HOST_IP", "x"),
        ("SGLANG_CACHE_DIR", "/cache"),
        ("NCCL_NET", "Socket"),
    )
    plan = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, env=env))
    _, e = launch_env(plan)["dgx6"]
    assert e["GLOO_SOCKET_IFNAME"] == "eth9" and e["NCCL_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert e["NCCL_NET"] == "Socket" and e["NCCL_CROSS_NIC"] == "1"  # the recipe may allow sockets
    assert e["SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK"] == "1"
    assert e["SGLANG_HOST_IP"] == "10.0.0.6"
    assert e["SGLANG_CACHE_DIR"] == "/cache" and e["TORCHINDUCTOR_CACHE_DIR"] == "/root/.cache/torchinductor"


def test_show_marks_every_undetected_address_and_gives_the_container_roce():
    cmds = lane_commands(load_plan("dsv41", spec="dspark"))
    for node, cmd in cmds.items():
        mark = f"<{node} enp1s0f1np1 address, detected at boot>"
        assert f"'VLLM_HOST_IP={mark}'" in cmd
        assert "--master-addr '<dgx5 enp1s0f1np1 address, detected at boot>'" in cmd
        assert "--device /dev/infiniband --cap-add IPC_LOCK --ulimit memlock=-1:-1" in cmd
        assert "--privileged" not in cmd
    assert node_addresses(load_plan("sim"), ["localhost"]) == {}  # no fabric: management addresses


def test_privileged_containers_get_no_separate_device_flags():
    plan = load_plan("dsv41")
    docker = dataclasses.replace(plan.engine.docker, privileged=True, shm_size="16g")
    plan = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, docker=docker))
    cmd = lane_commands(plan)["dgx5"]
    assert " --privileged " in cmd and "--device /dev/infiniband" not in cmd and "--shm-size 16g" in cmd


def test_compile_cache_mounts_expand_home_on_the_node(tmp_path):
    """The command run by a real shell with a recording `docker`: $HOME is the node's, the folders exist."""
    plan = with_addresses(load_plan("dsv41"))
    cmd = lane_commands(plan)["dgx6"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    (bin_dir / "docker").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path / "home")}
    out = subprocess.run(
        ["sh", "-c", cmd], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    volumes = [out[i + 1] for i, a in enumerate(out) if a == "-v"]
    cache = tmp_path / "home" / ".cache" / "labkit" / "compile" / "vllm"
    assert f"{cache}/vllm:/root/.cache/vllm" in volumes and f"{cache}/triton:/root/.triton" in volumes
    assert (cache / "flashinfer").is_dir() and (cache / "tilelang").is_dir()


def test_parse_address_reads_ip_output_and_names_the_node():
    line = "3: enp1s0f1np1    inet 192.168.177.11/24 brd 192.168.177.255 scope global enp1s0f1np1\\       valid_lft"
    assert parse_address("dgx5", "enp1s0f1np1", line) == "192.168.177.11"
    with pytest.raises(LabkitError, match=r"^dgx6: cannot detect the fabric address of cx7: Device"):
        parse_address("dgx6", "cx7", "", 'Device "cx7" does not exist.', ok=False)
    with pytest.raises(LabkitError, match="no IPv4 address"):
        parse_address("dgx6", "cx7", "", "", ok=True)


FABRIC_TOML = '[cluster.fabric]\ninterface = "cx7"\n'


def test_cluster_lane_detects_fabric_addresses_at_boot(cluster, tmp_path):
    cluster.clear_calls()
    plan = sim_recipe(
        tmp_path / "lane",
        18351,
        nodes=cluster.addresses,
        runtime="docker",
        ssh_port=cluster.port,
        user=cluster.user,
        extra=FABRIC_TOML,
    )
    lane = Lane(
        served_plan(plan),
        ssh=cluster.ssh_options(),
        sink=RunFolderSink(tmp_path / "run"),
        poll=0.1,
        stop_grace=3,
    )
    try:
        with lane.up() as ep:
            assert ep.base_url == f"http://{cluster.addresses[0]}:18351/v1"  # the client: management address
            fabric = ep.boot.fabric
        assert_clean_cluster(lane, cluster)
    finally:
        lane.close()
    for i, addr in enumerate(cluster.addresses):
        assert fabric[addr] == {
            "interface": "cx7",
            "address": f"10.10.0.{5 + i}",
            "source": "detected at boot",
        }
        (run,) = [c for c in cluster.calls(addr) if c[0] == "run"]
        assert "NCCL_SOCKET_IFNAME=cx7" in run and "GLOO_SOCKET_IFNAME=cx7" in run
        assert "--device" not in run  # no HCAs, no RoCE devices
    assert (tmp_path / "run" / "boot.json").read_text().count('"detected at boot"') == 4


def test_a_node_without_the_fabric_interface_stops_the_start_before_anything_runs(cluster, tmp_path):
    cluster.clear_calls()
    cluster.set_interfaces(cluster.addresses[2], {"cx7": None})
    plan = sim_recipe(
        tmp_path / "lane",
        18352,
        nodes=cluster.addresses,
        runtime="docker",
        ssh_port=cluster.port,
        user=cluster.user,
        extra=FABRIC_TOML,
    )
    lane = Lane(
        served_plan(plan),
        ssh=cluster.ssh_options(),
        sink=RunFolderSink(tmp_path / "run"),
        poll=0.1,
        stop_grace=3,
    )
    try:
        with pytest.raises(NodeError) as e:
            lane.start()
        assert set(e.value.failures) == {cluster.addresses[2]}
        assert 'Device "cx7" does not exist.' in str(e.value) and "nothing was started" in str(e.value)
        for addr in cluster.addresses:
            assert not [c for c in cluster.calls(addr) if c[0] == "run"], addr
        assert_clean_cluster(lane, cluster)
    finally:
        cluster.set_interfaces(cluster.addresses[2], None)
        lane.close()
    assert os.environ.get("LABKIT_TEST_NODE") is None
