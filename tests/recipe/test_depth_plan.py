"""`[measure.depth]` (docs/measurement.md, "Context depth"): checked when the recipe is read, naming the file and
the key; a depth the lane's context window cannot hold is refused; absent, the plan, its hash and its
description are what they were."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from labkit.errors import RecipeError
from labkit.recipe import DepthPlan, describe_plan, load_recipe

BASE = """
[model]
repo = "org/model"
[engine]
kind = "sim"
{args}
[measure]
decode = {{ concurrency = [1], turns = 3, output_tokens = 32, warmup = 0 }}
{extra}
[variants.spec.none]
[variants.spec.deep]
measure.depth = {{ tokens = [0, 8192, 32768], cache = ["cached"] }}
"""


def recipe(tmp_path: Path, extra: str = "", args: str = "", name: str = "lane") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(BASE.format(extra=extra, args=args)))
    return folder


def test_no_depth_is_the_plan_it_was(tmp_path):
    plain = load_recipe(recipe(tmp_path)).resolve({"spec": "none"})
    assert plain.measure.depth is None and "depth" not in plain.resolved["measure"]
    assert "tokens of context" not in describe_plan(plain)


def test_the_table_and_a_variant_make_the_plan(tmp_path):
    rec = load_recipe(recipe(tmp_path, "[measure.depth]\ntokens = [0, 4096]\nprompt_tokens = 256"))
    own, deep = rec.resolve({"spec": "none"}), rec.resolve({"spec": "deep"})
    assert own.measure.depth == DepthPlan((0, 4096), ("uncached", "cached"), 256, 64, 1)
    assert deep.measure.depth == DepthPlan((0, 8192, 32768), ("cached",), 256, 64, 1)
    assert own.recipe_hash != deep.recipe_hash
    # uncached at 0 and 4096, a load and a cached request at 4096; only cached: nothing at depth 0
    assert own.measure.depth.requests() == 4 and deep.measure.depth.requests() == 4
    assert deep.measure.depth.states(0) == () and own.measure.depth.states(0) == ("uncached",)
    text = describe_plan(own)
    assert (
        "0, 4,096 tokens of context, uncached and cached x 1, ~256-token questions, 64-token answers" in text
    )


@pytest.mark.parametrize(
    "extra,key,words",
    [
        ("[measure.depth]\ncache = ['cached']", "measure.depth.tokens", "required"),
        ("[measure.depth]\ntokens = []", "measure.depth.tokens", "empty"),
        ("[measure.depth]\ntokens = [8192, 8192]", "measure.depth.tokens", ""),
        ("[measure.depth]\ntokens = [-1]", "measure.depth.tokens[0]", ""),
        ("[measure.depth]\ntokens = [0]\ncache = ['warm']", "measure.depth.cache[0]", "uncached"),
        ("[measure.depth]\ntokens = [0]\nprompt_tokens = 2", "measure.depth.prompt_tokens", ""),
        ("[measure.depth]\ntokens = [0]\ndepth = 3", "measure.depth.depth", ""),
    ],
)
def test_bad_depth_keys_name_the_file_and_key(tmp_path, extra, key, words):
    folder = recipe(tmp_path, extra)
    with pytest.raises(RecipeError) as e:
        load_recipe(folder).resolve({"spec": "none"})
    assert str(folder / "recipe.toml") in str(e.value) and key in str(e.value) and words in str(e.value)


def test_a_depth_over_the_context_window_is_refused(tmp_path):
    fits = recipe(tmp_path, "[measure.depth]\ntokens = [0, 8192]", '[engine.args]\n"--max-model-len" = 40000')
    assert load_recipe(fits).resolve({"spec": "deep"}).measure.depth.tokens == (0, 8192, 32768)
    short = recipe(tmp_path, "", '[engine.args]\n"--max-model-len" = 16384', name="short")
    with pytest.raises(RecipeError) as e:
        load_recipe(short)  # the deep variant must resolve too
    text = str(e.value)
    assert "measure.depth.tokens[2]" in text and "32,768 tokens of context" in text and "16,384" in text


def test_depth_measures_can_be_target_measures(tmp_path):
    extra = (
        "target_ci = 0.05\ntarget_measures = ['depth_8192_ttft_cached', 'agentic_ttft_t2']\n"
        "agentic = { turns = 2 }\n[measure.depth]\ntokens = [8192]"
    )
    plan = load_recipe(recipe(tmp_path, extra)).resolve({"spec": "none"}).measure
    assert plan.ci_measures() == ("depth_8192_ttft_cached", "agentic_ttft_t2")
    bad = extra.replace("depth_8192_ttft_cached", "depth_4096_ttft_cached")
    with pytest.raises(RecipeError, match=r"measure.target_measures\[0\].*depth_4096_ttft_cached"):
        load_recipe(recipe(tmp_path, bad, name="bad")).resolve({"spec": "none"})


def test_the_depth_override_keeps_the_recipes_keys_and_is_checked(tmp_path):
    from labkit.recipe import with_depth

    args = '[engine.args]\n"--max-model-len" = 40000'
    folder = recipe(tmp_path, "[measure.depth]\ntokens = [0]\nprompt_tokens = 32", args)
    plan = load_recipe(folder).resolve({"spec": "none"})
    deeper = with_depth(plan, "0, 4096")
    assert deeper.measure.depth == DepthPlan((0, 4096), ("uncached", "cached"), 32, 64, 1)
    assert deeper.resolved["measure"]["depth"]["tokens"] == [0, 4096]
    assert deeper.recipe_hash != plan.recipe_hash and plan.measure.depth.tokens == (0,)  # plan unchanged
    assert (
        with_depth(plan, "").measure.depth is None and "depth" not in with_depth(plan, "").resolved["measure"]
    )
    for bad, key in (("0,lots", "measure.depth.tokens[1]"), ("65536", "measure.depth.tokens[0]")):
        with pytest.raises(RecipeError) as e:
            with_depth(plan, bad)
        assert (
            str(folder / "recipe.toml") in str(e.value)
            and key in str(e.value)
            and "depth override" in str(e.value)
        )


def test_the_canary_table_makes_a_plan_and_a_line(tmp_path):
    from labkit.recipe.canaryplan import CanaryPlan

    plain = load_recipe(recipe(tmp_path, name="a")).resolve({"spec": "none"})
    assert plain.measure.canary is None and "canary" not in plain.resolved["measure"]
    on = load_recipe(recipe(tmp_path, "canary = { requests = 2 }", name="b")).resolve({"spec": "none"})
    assert on.measure.canary == CanaryPlan(2, 64, 0.15) and on.recipe_hash != plain.recipe_hash
    assert (
        "2 requests of 64 forced tokens before and after each run; slow-canary above +15%"
        in describe_plan(on)
    )
    with pytest.raises(RecipeError, match=r"measure.canary.slow"):
        load_recipe(recipe(tmp_path, "canary = { slow = 0 }", name="c"))


def test_an_sglang_context_length_bounds_the_depth_too(tmp_path):
    """SGLang spells the window --context-length; the depth check used to read only --max-model-len."""
    short = recipe(tmp_path, "", '[engine.args]\n"--context-length" = 16384', name="short")
    with pytest.raises(RecipeError) as e:
        load_recipe(short)
    text = str(e.value)
    assert "measure.depth.tokens[2]" in text and "16,384" in text and "--context-length" in text
