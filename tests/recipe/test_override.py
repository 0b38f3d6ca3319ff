"""Parallelism vs nodes (tp·pp·dp = nodes × gpus_per_node for multi-node vLLM/SGLang), at load and again
after a nodes override through `with_nodes`, which also checks the names."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from labkit.errors import RecipeError
from labkit.recipe import list_recipes, load_recipe, with_nodes
from labkit.recipe.launch import FabricSpec
from labkit.recipe.lookup import load_plan

LANE = """
[model]
repo = "org/model"
[engine]
kind = "{kind}"
image = "img:1"
parallel = {parallel}
{args}
[cluster]
nodes = {nodes}
gpus_per_node = {gpus}
"""


def lane(tmp_path: Path, kind="vllm", parallel="{ tp = 4 }", nodes=4, gpus=1, args="", local=False):
    folder = tmp_path / "lane"
    folder.mkdir(exist_ok=True)
    names = ["localhost"] if local else [f"dgx{5 + i}" for i in range(nodes)]
    text = LANE.format(kind=kind, parallel=parallel, nodes=json.dumps(names), gpus=gpus, args=args)
    (folder / "recipe.toml").write_text(textwrap.dedent(text))
    return folder


FITS = [
    dict(),  # TP4 on four one-GPU Sparks
    dict(parallel="{ tp = 2, pp = 2 }"),
    dict(parallel="{ tp = 2, dp = 2 }"),
    dict(parallel="{ tp = 4 }", nodes=2, gpus=2),
    dict(kind="sglang", parallel="{ tp = 4, ep = 2 }"),  # --ep-size divides --tp: ep does not count
    dict(kind="sglang", parallel="{ tp = 4, dp = 4 }", args='[engine.args]\n"--enable-dp-attention" = true'),
    dict(parallel="{ tp = 1 }", args='[engine.args]\n"--tensor-parallel-size" = 4'),  # recipe args win
    dict(kind="sim", parallel="{ tp = 1 }", nodes=3),  # single-process engines are not checked
    dict(parallel="{ tp = 2 }", local=True),  # one node: whatever its GPUs
]


@pytest.mark.parametrize("kw", FITS, ids=[str(kw) for kw in FITS])
def test_parallelism_that_fills_the_nodes_loads(tmp_path, kw):
    load_recipe(lane(tmp_path, **kw)).resolve({})


MISFITS = [
    (dict(nodes=3), "tp*pp*dp = 4*1*1 = 4 ranks, but 3 nodes x 1 GPU per node"),
    (dict(nodes=2), "4 ranks, but 2 nodes x 1 GPU per node (cluster.gpus_per_node) = 2 GPUs"),
    (dict(parallel="{ tp = 2 }"), "= 2 ranks, but 4 nodes"),  # fewer ranks than GPUs is refused too
    (dict(parallel="{ tp = 4, dp = 2 }"), "tp*pp*dp = 4*1*2 = 8 ranks"),
    (dict(gpus=2), "8 GPUs"),
    (dict(kind="sglang", parallel="{ tp = 4, dp = 2 }"), "= 8 ranks"),  # without DP attention dp adds GPUs
    (dict(parallel="{ tp = 4 }", args='[engine.args]\n"-tp" = 2'), "tp*pp*dp = 2*1*1 = 2 ranks"),
    (
        dict(
            kind="sglang", parallel="{ tp = 2, dp = 2 }", args='[engine.args]\n"--enable-dp-attention" = true'
        ),
        "tp*pp = 2*1 = 2 ranks",
    ),
]


@pytest.mark.parametrize("kw,why", MISFITS, ids=[why for _, why in MISFITS])
def test_parallelism_that_does_not_fill_the_nodes_is_refused(tmp_path, kw, why):
    with pytest.raises(RecipeError) as info:
        load_recipe(lane(tmp_path, **kw))
    err = info.value
    assert err.key == "engine.parallel" and why in err.message, str(err)
    assert err.file.endswith("lane/recipe.toml")


def test_gpus_per_node_must_be_positive(tmp_path):
    with pytest.raises(RecipeError, match=r"cluster\.gpus_per_node: expected an integer >= 1, got 0"):
        load_recipe(lane(tmp_path, gpus=0))


def test_nodes_override_refuses_tp4_on_three_nodes():
    plan = load_plan("dsv41")
    with pytest.raises(RecipeError) as info:
        with_nodes(plan, "dgx5,dgx6,dgx7")
    err = info.value
    assert err.file == plan.file and err.key == "cluster.nodes"
    assert "tp*pp*dp = 4*1*1 = 4 ranks, but 3 nodes x 1 GPU per node" in err.message
    assert err.message.endswith("(nodes override: dgx5, dgx6, dgx7)")
    with pytest.raises(RecipeError, match=r"2 nodes x 1 GPU .*\(nodes override: dgx5, dgx6\)"):
        with_nodes(load_plan("prod"), ["dgx5", "dgx6"])


@pytest.mark.parametrize(
    "nodes,key,why",
    [
        ("dgx5;id,dgx6,dgx7,dgx8", "cluster.nodes[0]", "expected a host name"),
        ("dgx5,-oProxyCommand=x,dgx7,dgx8", "cluster.nodes[1]", "expected a host name"),
        ("dgx5,dgx6,dgx5,dgx8", "cluster.nodes[2]", "duplicate entry 'dgx5'"),
        (" , ", "cluster.nodes", "must not be empty"),
        ([5, "dgx6", "dgx7", "dgx8"], "cluster.nodes[0]", "expected a string"),
    ],
)
def test_nodes_override_checks_the_names(nodes, key, why):
    plan = load_plan("dsv41")
    with pytest.raises(RecipeError) as info:
        with_nodes(plan, nodes)
    err = info.value
    assert (err.file, err.key) == (plan.file, key) and why in err.message
    assert "(nodes override: " in err.message
    assert plan.cluster.nodes == ("dgx5", "dgx6", "dgx7", "dgx8")  # the plan is untouched


def test_nodes_override_that_fits():
    plan = load_plan("dsv41", spec="dspark")
    moved = with_nodes(plan, " dgx8, dgx7 ,dgx6,dgx5 ")
    assert moved.cluster.nodes == ("dgx8", "dgx7", "dgx6", "dgx5") and moved.cluster.head == "dgx8"
    assert moved.resolved["cluster"]["nodes"] == ["dgx8", "dgx7", "dgx6", "dgx5"]  # run.json says what ran
    assert moved.recipe_hash != plan.recipe_hash and moved.lane_id == plan.lane_id
    assert moved.engine == plan.engine and moved.cluster.fabric == plan.cluster.fabric
    same = with_nodes(plan, list(plan.cluster.nodes))
    assert same == plan and same.recipe_hash == plan.recipe_hash and same.resolved == plan.resolved


def test_nodes_override_keeps_addresses_of_the_nodes_that_stay(tmp_path):
    folder = lane(tmp_path, parallel="{ tp = 2 }", nodes=2)
    text = (folder / "recipe.toml").read_text()
    text += '[cluster.fabric]\ninterface = "lo"\naddresses = { dgx5 = "127.0.0.2", dgx6 = "127.0.0.3" }\n'
    (folder / "recipe.toml").write_text(text)
    plan = load_recipe(folder).resolve({})
    moved = with_nodes(plan, "dgx5,dgx9")
    assert moved.cluster.fabric == FabricSpec("lo", (), (("dgx5", "127.0.0.2"),))
    assert moved.cluster.fabric.address("dgx9") is None  # detected at boot
    assert moved.resolved["cluster"]["fabric"]["addresses"] == {"dgx5": "127.0.0.2"}


def test_nodes_override_on_single_process_lanes():
    plan = with_nodes(load_plan("sim"), "127.0.0.2,127.0.0.3")
    assert plan.cluster.nodes == ("127.0.0.2", "127.0.0.3")


def test_every_shipped_multinode_lane_fills_its_nodes():
    for folder in list_recipes():
        recipe = load_recipe(folder)
        for axis, names in {**recipe.axes, "": [""]}.items():
            for name in names:
                plan = recipe.resolve({axis: name} if axis else {})
                assert with_nodes(plan, plan.cluster.nodes) == plan
