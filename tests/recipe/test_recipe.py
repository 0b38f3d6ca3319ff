"""Recipe loading, validation errors, variant resolution and alias lookup."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from labkit.errors import RecipeError
from labkit.recipe import find_recipe, list_recipes, load_recipe
from labkit.recipe.lookup import load_plan, recipes_dir

MINIMAL = """
[model]
repo = "org/model"

[engine]
kind = "sim"
"""

VIEW = """
[model]
repo = "org/model"
[engine]
kind = "vllm"
image = "img:1"
parallel = {{tp = 2}}
[cluster]
nodes = ["a", "b"]
shared_cache = "/nas/hub"
[[staging]]
kind = "local-view"
repo = "org/model"
dst = "{dst}"
local = [{local}]
"""


def write_recipe(tmp_path: Path, text: str, name: str = "lane") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(text))
    return folder


def error_of(tmp_path: Path, text: str) -> RecipeError:
    folder = write_recipe(tmp_path, text)
    with pytest.raises(RecipeError) as info:
        load_recipe(folder)
    return info.value


def test_every_shipped_recipe_loads_and_every_variant_resolves():
    folders = list_recipes()
    assert {f.name for f in folders} >= {
        "sim",
        "dsv41-flash-1017-4x-vllm032",
        "dsv41-flash-1017-4x-sglang-ep2",
    }
    for folder in folders:
        recipe = load_recipe(folder)
        assert recipe.note.is_file(), f"{folder.name} has no NOTE.md"
        for axis, names in recipe.axes.items():
            for name in names:
                plan = recipe.resolve({axis: name})
                assert plan.variant(axis) == name
                json.dumps(plan.to_dict())  # serialisable for run.json


def test_dspark_adds_speculative_config_json():
    plan = load_plan("dsv41", spec="dspark")
    assert plan.engine.arg("--speculative-config") == ('{"method":"dspark","num_speculative_tokens":5}',)
    assert plan.label == "stock vLLM + DSpark k5"
    base = load_plan("dsv41")
    assert base.engine.arg("--speculative-config") is None
    assert base.variants == (("spec", "none"), ("staging", "nas"))
    # the overlay appends (speculation, and its per-request counts), keeping every base flag
    flags = [f for f, _ in plan.engine.args]
    assert flags[:-2] == [f for f, _ in base.engine.args]
    assert flags[-2:] == ["--speculative-config", "--per-request-spec-decode-metrics"]


def test_local_view_rewrites_model_path_and_mounts():
    nas = load_plan("dsv41", staging="nas")
    view = load_plan("dsv41", staging="local-view")
    assert nas.model_path == "/mnt/nas/hf/hub/models--deepseek-ai--DeepSeek-V4.1-Flash-1017/snapshots/main"
    assert view.model_path == "/root/.cache/hf-view"
    assert ("/home/kilork/models/dsv41-1017-local", "/root/.cache/hf-view") in view.mounts()
    assert ("/mnt/nas/hf/hub", "/mnt/nas/hf/hub") in view.mounts()
    st = view.view
    assert st.local == ("model-00047-of-00048.safetensors", "model-00048-of-00048.safetensors")
    assert st.min_free == 10 * 10**9
    assert nas.view is None
    assert nas.lane_id != view.lane_id and nas.recipe_hash != view.recipe_hash


def test_lane_id_is_deterministic():
    assert (
        load_plan("dsv41", spec="dspark").lane_id
        == load_plan("dsv41-flash-1017-4x-vllm032", spec="dspark").lane_id
    )


def test_aliases_and_prefix_lookup():
    assert find_recipe("dsv41").name == "dsv41-flash-1017-4x-vllm032"
    assert find_recipe("prod").name == "dsv41-flash-1017-4x-sglang-ep2"
    assert find_recipe("dsv41-flash-1017-4x-s").name == "dsv41-flash-1017-4x-sglang-ep2"
    assert find_recipe("sim").name == "sim"
    assert find_recipe(str(recipes_dir() / "sim" / "recipe.toml")).name == "sim"


def test_a_copied_recipes_aliases_are_refused_not_picked_silently(tmp_path, monkeypatch, capsys):
    """Step one of "your own lane" is copying a recipe, aliases and all: `dsv41` then named two recipes and
    the lookup took whichever came first, and `labkit check` said ok."""
    import shutil

    from labkit.cli.app import main

    root = tmp_path / "recipes"
    shutil.copytree(recipes_dir() / "dsv41-flash-1017-4x-vllm032", root / "dsv41-flash-1017-4x-vllm032")
    shutil.copytree(recipes_dir() / "dsv41-flash-1017-4x-vllm032", root / "mylane")
    with pytest.raises(RecipeError, match=r"mylane/recipe.toml: lane.aliases: alias 'dsv41' is claimed by 2"):
        find_recipe("dsv41", root)
    assert find_recipe("mylane", root).name == "mylane"  # its folder name still finds it
    monkeypatch.setenv("LABKIT_RECIPES", str(root))
    assert main(["check"]) == 1
    assert "FAIL " + str(root / "mylane" / "recipe.toml") + ": lane.aliases: 'dsv41' is also an alias of" in (
        capsys.readouterr().out
    )


def test_unknown_recipe_suggests_closest():
    with pytest.raises(RecipeError, match=r"no recipe 'dsv42'.*did you mean 'dsv41'"):
        find_recipe("dsv42")
    with pytest.raises(RecipeError, match="ambiguous"):
        find_recipe("dsv41-flash")


def test_unknown_variant_suggests_closest():
    with pytest.raises(RecipeError, match=r"variants\.spec: no variant 'dspak'.*did you mean 'dspark'"):
        load_plan("dsv41", spec="dspak")
    with pytest.raises(RecipeError, match=r"no variant axis 'staging'"):
        load_plan("sim", staging="local-view")


def test_sglang_lane_parallelism():
    plan = load_plan("prod")
    assert (plan.engine.parallel.tp, plan.engine.parallel.ep) == (4, 2)
    assert plan.engine.kind == "sglang" and plan.cluster.nodes == ("dgx5", "dgx6", "dgx7", "dgx8")


def test_minimal_recipe_defaults(tmp_path):
    plan = load_recipe(write_recipe(tmp_path, MINIMAL)).resolve({})
    assert plan.engine.runtime == "process"
    assert plan.cluster.nodes == ("localhost",)
    assert plan.measure.decode.concurrency == (1, 2)
    assert plan.measure.prefill.prompt_tokens == (4096, 12600)
    assert plan.variant_id == "default"
    assert plan.model_path == "org/model"


def test_args_render_and_remove(tmp_path):
    text = (
        MINIMAL
        + """
[engine.args]
"--flag" = true
"--off" = false
"--n" = 3
"--sizes" = [1, 2, 4]
"--cfg" = {a = 1, b = "x"}

[variants.mode.lean]
engine.remove_args = ["--flag"]
engine.args."--n" = 4
"""
    )
    recipe = load_recipe(write_recipe(tmp_path, text))
    plan = recipe.resolve({})
    assert plan.engine.argv() == ["--n", "4", "--sizes", "1", "2", "4", "--cfg", '{"a":1,"b":"x"}']


# --- a dozen broken recipes, each error checked -------------------------------------------------------

BROKEN = [
    ("[model\nrepo = 'x'", r"TOML syntax error: .*line 1, column"),
    (
        MINIMAL + "\n[engine.parallel]\ntpp = 2\n",
        r"engine\.parallel\.tpp: unknown key \(did you mean 'tp'\?\)",
    ),
    (
        MINIMAL.replace('kind = "sim"', 'kind = "vlm"'),
        r"engine\.kind: expected one of vllm, sglang, llamacpp, sim, got 'vlm' \(did you mean 'vllm'\?\)",
    ),
    ('[engine]\nkind = "sim"\n', r"model: required key is missing"),
    (MINIMAL + "\n[measure]\nrunss = 3\n", r"measure\.runss: unknown key \(did you mean 'runs'\?\)"),
    (
        MINIMAL + '\n[measure.decode]\nturns = "five"\n',
        r"measure\.decode\.turns: expected an integer, got a string",
    ),
    (MINIMAL + "\n[measure.decode]\nconcurrency = []\n", r"measure\.decode\.concurrency: must not be empty"),
    (
        MINIMAL.replace('kind = "sim"', 'kind = "vllm"'),
        r"engine\.image: required when engine\.runtime is docker",
    ),
    (
        MINIMAL + "\n[engine.args]\nmax-model-len = 4\n",
        r"engine\.args\.max-model-len: engine arg keys are flags",
    ),
    (
        MINIMAL + "\n[variants.spec.dspark]\nengine.argz = {}\n",
        r"variants\.spec\.dspark\.engine\.argz: unknown key \(did you mean 'args'\?\)",
    ),
    (
        MINIMAL + '\n[variants.spec.dspark]\nengine.remove_args = ["--nope"]\n',
        r"variants\.spec\.dspark\.engine\.remove_args\[0\]: flag --nope is not in engine\.args",
    ),
    (
        MINIMAL + '\n[lane]\ndefaults = {spec = "x"}\n[variants.spec.none]\n',
        r"lane\.defaults\.spec: no variant 'x' on axis 'spec'",
    ),
    (
        MINIMAL + '\n[engine.env]\n"BAD-NAME" = "1"\n',
        r"engine\.env\.BAD-NAME: not a valid environment variable name",
    ),
    (
        VIEW.format(dst="home/models", local='"a.safetensors"'),
        r"staging\[0\]\.dst: expected an absolute path",
    ),
    (VIEW.format(dst="/home/../etc", local='"a.safetensors"'), r"staging\[0\]\.dst: must not contain '\.\.'"),
    (
        VIEW.format(dst="/home/m", local='"../a.safetensors"'),
        r"staging\[0\]\.local\[0\]: expected a bare file name",
    ),
    (
        VIEW.format(dst="/home/m", local='"sub/a.safetensors"'),
        r"staging\[0\]\.local\[0\]: expected a bare file name",
    ),
    (
        VIEW.format(dst="/nas/hub/view", local='"a.safetensors"'),
        r"staging\[0\]\.dst: /nas/hub/view is inside the shared cache",
    ),
    (
        VIEW.format(dst="/home/m", local='"a.safetensors"').replace(
            "[[staging]]", "min_free = 1\n[[staging]]"
        ),
        r"cluster\.min_free: unknown key",
    ),
    (
        VIEW.format(dst="/home/m", local='"a.safetensors"') + 'min_free = "10 XB"\n',
        r"staging\[0\]\.min_free: expected a size like",
    ),
    (
        VIEW.format(dst="/home/m", local='"a.safetensors"')
        .replace('nodes = ["a", "b"]', 'nodes = ["a", "b", "c"]')
        .replace("parallel = {tp = 2}", "parallel = {tp = 4}"),
        r"engine\.parallel: tp\*pp\*dp = 4\*1\*1 = 4 ranks, but 3 nodes x 1 GPU per node \(cluster\.gpus_per_node\) = 3",
    ),
]


@pytest.mark.parametrize("text,pattern", BROKEN, ids=[f"broken{i}" for i in range(len(BROKEN))])
def test_broken_recipes_name_file_and_key(tmp_path, text, pattern):
    err = error_of(tmp_path, text)
    message = str(err)
    assert message.startswith(str(tmp_path / "lane" / "recipe.toml")) or "lane/recipe.toml" in message
    assert __import__("re").search(pattern, message), message


def test_broken_variant_error_names_the_variant(tmp_path):
    text = MINIMAL + '\n[variants.rt.docker]\nengine.runtime = "docker"\n[variants.rt.proc]\n'
    err = error_of(tmp_path, text)
    assert "engine.image" in str(err) and "with variants rt=docker" in str(err)


def test_missing_file(tmp_path):
    with pytest.raises(RecipeError, match="file not found"):
        load_recipe(tmp_path / "nope")


def test_plan_is_immutable():
    plan = load_plan("sim")
    with pytest.raises(AttributeError):
        plan.label = "x"  # type: ignore[misc]
