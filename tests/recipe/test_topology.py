"""`[cluster.fabric].topology` and `interfaces` (issue 27): parsing and defaults, bad values refused with the file
and key, a switch fabric resolving exactly as before the keys existed, a nodes override keeping only the
remaining nodes' interfaces, the ring's NCCL mesh set in every node's environment (recipe env wins) and in
`labkit show`."""

from __future__ import annotations

import pytest

from labkit.recipe import describe_plan, load_recipe, mesh_env
from labkit.recipe.launch import FabricSpec
from labkit.recipe.override import with_nodes
from labkit.serve.plan import lane_commands, launches
from tests.recipe.test_launch import plan_of, refused, write

RING = """
[cluster.fabric]
topology = "ring"
interface = "enP7s7"
hcas = ["rocep1s0f0", "roceP2p1s0f0", "rocep1s0f1", "roceP2p1s0f1"]
"""


def four(tmp_path, fabric: str, env: str = ""):
    """A four-node vLLM lane (TP4) with `fabric` as its [cluster.fabric] table and `env` in [engine.env]."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    folder = write(tmp_path, "")
    text = (folder / "recipe.toml").read_text()
    text = text.replace("parallel = { tp = 2 }", "parallel = { tp = 4 }")
    text = text.replace('nodes = ["dgx5", "dgx6"]', 'nodes = ["dgx5", "dgx6", "dgx7", "dgx8"]')
    if env:
        text = text.replace("[cluster]", f"[engine.env]\n{env}\n[cluster]")
    (folder / "recipe.toml").write_text(text + fabric)
    return load_recipe(folder).resolve()


def test_topology_defaults_to_switch_and_per_node_interfaces_parse(tmp_path):
    plan = plan_of(tmp_path, '[cluster.fabric]\ninterface = "enp1s0f1np1"\n')
    assert plan.cluster.fabric == FabricSpec("enp1s0f1np1")
    assert plan.cluster.fabric.topology == "switch" and not plan.cluster.fabric.ring
    plan = plan_of(
        tmp_path, '[cluster.fabric]\ninterface = "enp1s0f1np1"\ninterfaces = { dgx6 = "enp1s0f0np0" }\n'
    )
    fabric = plan.cluster.fabric
    assert fabric.interfaces == (("dgx6", "enp1s0f0np0"),)
    assert (fabric.interface_of("dgx5"), fabric.interface_of("dgx6")) == ("enp1s0f1np1", "enp1s0f0np0")


BAD = [
    (
        '[cluster.fabric]\ninterface = "lo"\ntopology = "mesh"\n',
        "cluster.fabric.topology",
        "expected one of switch, ring",
    ),
    (
        '[cluster.fabric]\ninterface = "lo"\ninterfaces = { dgx9 = "eth0" }\n',
        "cluster.fabric.interfaces.dgx9",
        "'dgx9' is not one of cluster.nodes",
    ),
    (
        '[cluster.fabric]\ninterface = "lo"\ninterfaces = { dgx6 = "eth0;id" }\n',
        "cluster.fabric.interfaces.dgx6",
        "expected a network interface name",
    ),
    (
        '[cluster.fabric]\ninterface = "lo"\ninterfaces = ["eth0"]\n',
        "cluster.fabric.interfaces",
        "expected a table",
    ),
    (
        '[cluster.fabric]\ninterface = "lo"\ntopolgy = "ring"\n',
        "cluster.fabric.topolgy",
        "did you mean 'topology'",
    ),
]


@pytest.mark.parametrize("extra,key,why", BAD, ids=[k for _, k, _ in BAD])
def test_bad_topology_values_name_file_and_key(tmp_path, extra, key, why):
    err = refused(tmp_path, extra)
    assert (err.key, why in err.message) == (key, True), str(err)


def test_a_switch_fabric_resolves_as_before_the_keys_existed(tmp_path):
    """The keys' defaults stay out of the recipe hash (so stored runs keep comparing), and `labkit show` and the
    commands of a fabric without them are what they were."""
    for sub in "abc":
        (tmp_path / sub).mkdir()
    plain = plan_of(tmp_path / "a", '[cluster.fabric]\ninterface = "enp1s0f1np1"\n')
    explicit = plan_of(
        tmp_path / "b", '[cluster.fabric]\ninterface = "enp1s0f1np1"\ntopology = "switch"\ninterfaces = {}\n'
    )
    assert plain.recipe_hash == explicit.recipe_hash and plain.lane_id == explicit.lane_id
    assert describe_plan(plain).replace(str(tmp_path / "a"), "") == describe_plan(explicit).replace(
        str(tmp_path / "b"), ""
    )
    shown = describe_plan(plain)
    assert "topology" not in shown and "mesh env" not in shown and "NCCL_NET_PLUGIN" not in shown
    for cmd in lane_commands(plain).values():
        assert "NCCL_NET_PLUGIN" not in cmd and "NCCL_ALGO" not in cmd
    ring = plan_of(tmp_path / "c", '[cluster.fabric]\ninterface = "enp1s0f1np1"\ntopology = "ring"\n')
    assert ring.recipe_hash != plain.recipe_hash  # a ring is another lane


def test_a_nodes_override_keeps_only_the_remaining_nodes_interfaces(tmp_path):
    plan = plan_of(tmp_path, '[cluster.fabric]\ninterface = "lo"\ninterfaces = { dgx6 = "eth1" }\n')
    assert plan.cluster.fabric.interfaces == (("dgx6", "eth1"),)
    moved = with_nodes(plan, ["dgx5", "dgx7"])
    assert moved.cluster.fabric.interfaces == () and moved.cluster.fabric.interface_of("dgx7") == "lo"
    assert moved.resolved["cluster"]["fabric"]["interfaces"] == {}
    assert with_nodes(plan, ["dgx6", "dgx5"]).cluster.fabric.interfaces == (("dgx6", "eth1"),)


def test_mesh_env_is_the_launchers_ring_set():
    assert mesh_env("switch", 4) == {}
    assert mesh_env("ring", 1) == {}
    assert mesh_env("ring", 3) == {
        "NCCL_NET_PLUGIN": "none",
        "NCCL_IB_SUBNET_AWARE_ROUTING": "1",
        "NCCL_IB_MERGE_NICS": "0",
    }
    assert mesh_env("ring", 4) == {**mesh_env("ring", 3), "NCCL_ALGO": "Ring"}


def test_a_ring_lanes_commands_carry_the_mesh_set_and_recipe_env_wins(tmp_path):
    plan = four(tmp_path / "a", RING)
    for ln in launches(plan):
        env = dict(ln.env)
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "enP7s7"
        assert env["NCCL_IB_HCA"] == "rocep1s0f0,roceP2p1s0f0,rocep1s0f1,roceP2p1s0f1"
        assert {k: env[k] for k in mesh_env("ring", 4)} == mesh_env("ring", 4)
    for cmd in lane_commands(plan).values():
        assert "NCCL_NET_PLUGIN=none" in cmd and "NCCL_ALGO=Ring" in cmd
    shown = describe_plan(plan)
    assert "topology" in shown and "ring: rendezvous and sockets over enP7s7" in shown
    assert "NCCL_NET_PLUGIN=none NCCL_IB_SUBNET_AWARE_ROUTING=1 NCCL_IB_MERGE_NICS=0 NCCL_ALGO=Ring" in shown
    mine = four(tmp_path / "b", RING, env='NCCL_ALGO = "Tree"')
    assert {dict(ln.env)["NCCL_ALGO"] for ln in launches(mine)} == {"Tree"}
    assert "NCCL_ALGO=Ring (engine.env: Tree)" in describe_plan(mine)


def test_per_node_interfaces_reach_each_nodes_environment_and_show(tmp_path):
    plan = four(
        tmp_path, '[cluster.fabric]\ninterface = "enp1s0f1np1"\ninterfaces = { dgx7 = "enp1s0f0np0" }\n'
    )
    ifnames = {ln.node: dict(ln.env)["NCCL_SOCKET_IFNAME"] for ln in launches(plan)}
    assert ifnames == {
        "dgx5": "enp1s0f1np1",
        "dgx6": "enp1s0f1np1",
        "dgx7": "enp1s0f0np0",
        "dgx8": "enp1s0f1np1",
    }
    env7 = dict(next(ln.env for ln in launches(plan) if ln.node == "dgx7"))
    assert env7["VLLM_HOST_IP"] == "<dgx7 enp1s0f0np0 address, detected at boot>"
    assert "fabric address  dgx7: detected at boot on enp1s0f0np0" in describe_plan(plan)
