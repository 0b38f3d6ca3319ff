"""Names that reach a shell or an argv are checked where they enter: node names, the SSH user, the image.

Each case loads the same recipe twice: with a good value it loads, with the bad one the error names the file
and the key and nothing else, so the bad value alone is what is refused.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from labkit.errors import RecipeError
from labkit.recipe import load_recipe, user_name
from labkit.recipe.names import image_reference, node_name
from labkit.recipe.schema import Invalid

LANE = """
[model]
repo = "org/model"
[engine]
kind = "vllm"
image = {image}
parallel = {{ tp = 2 }}
[cluster]
nodes = [{nodes}]
user = {user}
"""
GOOD = {"image": '"eugr/spark-vllm:nightly-20261015"', "nodes": '"dgx5", "dgx6"', "user": '"kilork"'}


def load(tmp_path: Path, **values: str):
    folder = tmp_path / "lane"
    folder.mkdir(exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(LANE.format(**{**GOOD, **values})))
    return load_recipe(folder)


BAD = [
    ("nodes", '"dgx5;id", "dgx6"', "cluster.nodes[0]", "expected a host name"),
    ("nodes", '"dgx5", "-oProxyCommand=x"', "cluster.nodes[1]", "expected a host name"),
    ("nodes", '"dgx5", "dgx6 -p 2222"', "cluster.nodes[1]", "expected a host name"),
    ("nodes", '"dgx5", "dgx_6"', "cluster.nodes[1]", "expected a host name"),
    ("nodes", '"dgx5", "a..b"', "cluster.nodes[1]", "expected a host name"),
    ("nodes", '"dgx5", "10.0.0.999"', "cluster.nodes[1]", "expected a host name"),
    ("nodes", '"dgx5", "dgx5-"', "cluster.nodes[1]", "expected a host name"),
    ("user", '"root@evil -p 22"', "cluster.user", "expected a user name"),
    ("user", '"Kilork"', "cluster.user", "expected a user name"),
    ("user", '"-oProxyCommand=x"', "cluster.user", "expected a user name"),
    ("user", '"' + "a" * 33 + '"', "cluster.user", "at most 32 characters"),
    ("image", '"--privileged -v /:/host alpine"', "engine.image", "expected an image reference"),
    ("image", '"eugr/Spark-vllm:1"', "engine.image", "expected an image reference"),
    ("image", '"eugr/spark-vllm:nightly 1"', "engine.image", "expected an image reference"),
    ("image", '"eugr/spark-vllm:-x"', "engine.image", "expected an image reference"),
    ("image", '"eugr/spark-vllm@sha256:abc"', "engine.image", "expected an image reference"),
    ("image", '"eugr/spark-vllm;id"', "engine.image", "expected an image reference"),
]


@pytest.mark.parametrize("key,value,where,why", BAD, ids=[f"{k}:{v}" for k, v, _, _ in BAD])
def test_bad_names_are_refused_with_file_and_key(tmp_path, key, value, where, why):
    assert load(tmp_path).resolve({}).cluster.nodes == ("dgx5", "dgx6")  # the rest of the recipe is fine
    with pytest.raises(RecipeError) as info:
        load(tmp_path, **{key: value})
    err = info.value
    assert err.key == where
    assert why in err.message
    assert str(err).startswith(f"{err.file}: {where}: ") and err.file.endswith("lane/recipe.toml")


GOOD_NAMES = [
    ("nodes", '"dgx5", "node-1.lab.example.org"'),
    ("nodes", '"127.0.0.2", "127.0.0.3"'),
    ("nodes", '"::1", "fe80::1"'),
    ("nodes", '"localhost", "DGX6"'),
    ("user", '"_svc"'),
    ("user", '"build-bot$"'),
    ("image", '"localhost:5000/org/name:tag"'),
    ("image", '"registry.example.com:5000/a/b/c"'),
    ("image", '"lmsysorg/sglang:v0.5.23-cu130-spark"'),
    ("image", '"alpine"'),
    ("image", '"org/name:1.2@sha256:' + "a" * 64 + '"'),
    ("image", '"org/name@sha256:' + "0" * 64 + '"'),
    ("image", '"[::1]:5000/org/na__me.x-y"'),
]


@pytest.mark.parametrize("key,value", GOOD_NAMES, ids=[f"{k}:{v}" for k, v in GOOD_NAMES])
def test_good_names_load(tmp_path, key, value):
    plan = load(tmp_path, **{key: value}).resolve({})
    if key == "image":
        assert plan.engine.image == value.strip('"')
    elif key == "user":
        assert plan.cluster.user == value.strip('"')
    else:
        assert ", ".join(f'"{n}"' for n in plan.cluster.nodes) == value


def test_head_address_is_a_host_name_or_address(tmp_path):
    text = "\n[cluster]\n" + 'head_address = "dgx5;id"\n'
    folder = tmp_path / "lane"
    folder.mkdir()
    (folder / "recipe.toml").write_text('[model]\nrepo = "o/m"\n[engine]\nkind = "sim"\n' + text)
    with pytest.raises(RecipeError, match=r"cluster\.head_address: expected a host name"):
        load_recipe(folder)


def test_checkers_on_their_own():
    assert node_name("dgx5", "k") == "dgx5"
    assert image_reference("a/b:c", "k") == "a/b:c"
    assert user_name("kilork", "k") == "kilork"
    with pytest.raises(Invalid, match=re.escape("k: expected a host name")):
        node_name("x" * 64, "k")  # a label is at most 63 characters
    with pytest.raises(Invalid, match="expected a host name"):
        node_name(".".join(["a" * 63] * 4) + ".b", "k")  # over 253 characters
    with pytest.raises(Invalid, match="expected an image reference"):
        image_reference("a" * 256, "k")  # the name part is at most 255 characters
    with pytest.raises(Invalid, match="expected a string"):
        node_name(5, "k")


def test_a_variant_with_a_bad_node_is_refused_naming_the_variant(tmp_path):
    folder = tmp_path / "lane"
    folder.mkdir()
    (folder / "recipe.toml").write_text(
        '[model]\nrepo = "o/m"\n[engine]\nkind = "sim"\n'
        '[variants.where.here]\n[variants.where.there]\ncluster.nodes = ["ok", "not ok"]\n'
    )
    with pytest.raises(
        RecipeError, match=r"variants\.where\.there\.cluster\.nodes\[1\]: expected a host name"
    ):
        load_recipe(folder)
