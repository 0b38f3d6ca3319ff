"""The recipe side of per-request server truth and output sanity: the engine facts say which switches an engine
offers, the vLLM lanes turn them on, the per-request speculative counts are refused without speculation,
`model.loops` is a checked boolean, and `labkit show` says what a lane will get (docs/engines.md, "Per-request
metrics in the response"; docs/measurement.md, "Output sanity")."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from labkit.errors import RecipeError
from labkit.recipe import ENGINE_FACTS, describe_plan, load_recipe
from labkit.recipe.lookup import list_recipes, load_plan

BASE = """
[model]
repo = "org/model"
{model}
[engine]
kind = "{kind}"
runtime = "process"
[engine.args]
{args}
[cluster]
nodes = ["localhost"]
"""


def recipe(tmp_path: Path, *, kind: str = "vllm", args: str = "", model: str = "") -> Path:
    folder = tmp_path / "lane"
    folder.mkdir(exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(BASE.format(kind=kind, args=args, model=model)))
    return folder


def test_the_facts_name_vllms_switches_and_no_others():
    vllm = ENGINE_FACTS["vllm"].request_metrics
    assert (
        vllm.timing == ("--enable-per-request-metrics",)
        and vllm.spec[0] == "--per-request-spec-decode-metrics"
    )
    assert vllm.spec_needs == "--speculative-config" and ENGINE_FACTS["sim"].request_metrics.offered
    assert (
        not ENGINE_FACTS["sglang"].request_metrics.offered
        and not ENGINE_FACTS["llamacpp"].request_metrics.offered
    )
    assert vllm.asked({"--enable-per-request-metrics": ()}) == ("--enable-per-request-metrics",)
    assert vllm.asked({"--per-request-spec-decode-metrics": ("none",)}) == ()


def test_every_vllm_lane_turns_the_switches_on_and_every_recipe_still_resolves():
    for folder in list_recipes():
        r = load_recipe(folder)
        for axis, names in r.axes.items():
            for name in names:
                r.resolve({axis: name})
    for name, spec in (("tiny-vllm", "ngram"), ("dsv41", "dspark")):
        base, fast = load_plan(name), load_plan(name, spec=spec)
        assert base.engine_metrics_asked and base.engine.arg("--enable-per-request-metrics") == ()
        assert fast.engine.arg("--per-request-spec-decode-metrics") == ("summary",)
        row = next(line for line in describe_plan(fast).splitlines() if line.startswith("server truth"))
        assert (
            row.split(None, 2)[2]
            == "per request: --enable-per-request-metrics, --per-request-spec-decode-metrics"
        )
    assert "none (llama-cpp-python returns no per-request figures)" in describe_plan(
        load_plan("tiny-llamacpp")
    )


def test_per_request_spec_counts_without_speculation_are_refused_naming_the_key(tmp_path):
    with pytest.raises(RecipeError) as info:
        load_recipe(recipe(tmp_path, args='"--per-request-spec-decode-metrics" = "summary"'))
    err = info.value
    assert (
        err.file.endswith("lane/recipe.toml") and err.key == 'engine.args."--per-request-spec-decode-metrics"'
    )
    assert "needs --speculative-config" in err.message
    ok = recipe(
        tmp_path, args='"--per-request-spec-decode-metrics" = "summary"\n"--speculative-config" = "{}"'
    )
    load_recipe(ok)
    load_recipe(recipe(tmp_path, args='"--per-request-spec-decode-metrics" = "none"'))  # off: nothing to need


def test_model_loops_is_a_checked_boolean_shown_beside_the_model(tmp_path):
    with pytest.raises(RecipeError) as info:
        load_recipe(recipe(tmp_path, model='loops = "yes"'))
    assert info.value.file.endswith("lane/recipe.toml") and info.value.key == "model.loops"
    plan = load_recipe(recipe(tmp_path, model="loops = true")).resolve({})
    assert plan.model.loops and "loops by nature: model.loops" in describe_plan(plan)
    assert not load_recipe(recipe(tmp_path)).resolve({}).model.loops
    assert load_plan("tiny-vllm").model.loops and load_plan("tiny-llamacpp").model.loops
    assert not load_plan("sim").model.loops and not load_plan("dsv41").model.loops


def test_a_recipe_without_model_loops_keeps_its_hash(tmp_path):
    """`model.loops` came later: unset or false, it is not in the resolved table, so a recipe that never set it
    keeps the hash (and the gate's recipe content) it had before the key existed."""
    absent = load_recipe(recipe(tmp_path)).resolve({})
    false = load_recipe(recipe(tmp_path, model="loops = false")).resolve({})
    true = load_recipe(recipe(tmp_path, model="loops = true")).resolve({})
    assert "loops" not in absent.resolved["model"] and not absent.model.loops and not false.model.loops
    assert absent.recipe_hash == false.recipe_hash != true.recipe_hash and true.model.loops
