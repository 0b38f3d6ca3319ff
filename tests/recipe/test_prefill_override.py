"""The prefill override (the bench notebook's `prefill` parameter, `lab.plan(prefill=...)`): other prompt lengths
with the recipe's repeats, checked as `measure.prefill` is, naming the file, the key and the override."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from labkit import lab
from labkit.errors import RecipeError
from labkit.recipe import PrefillPlan, load_recipe, with_prefill

BASE = """
[model]
repo = "org/model"
[engine]
kind = "sim"
[measure]
decode = {{ concurrency = [1], turns = 3, output_tokens = 32, warmup = 0 }}
prefill = {{ prompt_tokens = [4096, 12600], repeats = 2 }}
{extra}
"""


def plan_of(tmp_path: Path, extra: str = ""):
    folder = tmp_path / "lane"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(BASE.format(extra=extra)))
    return load_recipe(folder).resolve({})


def test_the_prefill_override_keeps_the_repeats_and_moves_the_hash(tmp_path):
    plan = plan_of(tmp_path)
    short = with_prefill(plan, "1024, 4096")
    assert short.measure.prefill == PrefillPlan((1024, 4096), 2)
    assert short.resolved["measure"]["prefill"] == {"prompt_tokens": [1024, 4096], "repeats": 2}
    assert short.recipe_hash != plan.recipe_hash and plan.measure.prefill.prompt_tokens == (4096, 12600)
    assert with_prefill(plan, 4096).measure.prefill == PrefillPlan(
        (4096,), 2
    )  # papermill's `-p prefill 4096`
    assert with_prefill(plan, "").measure.prefill.prompt_tokens == ()  # no prefill window
    assert with_prefill(plan, [4096, 12600]).recipe_hash == plan.recipe_hash  # the recipe's own lengths


@pytest.mark.parametrize(
    ("given", "key"),
    [("1024,lots", "measure.prefill.prompt_tokens[1]"), ("8", "measure.prefill.prompt_tokens[0]")],
)
def test_a_bad_prompt_length_names_the_file_the_key_and_the_override(tmp_path, given, key):
    plan = plan_of(tmp_path)
    with pytest.raises(RecipeError) as e:
        with_prefill(plan, given)
    assert e.value.file.endswith("lane/recipe.toml") and e.value.key == key
    assert "prefill override:" in str(e.value)


def test_a_prefill_override_that_leaves_a_target_measure_unmeasurable_is_refused(tmp_path):
    plan = plan_of(tmp_path, 'target_ci = 0.05\ntarget_measures = ["prefill_12600"]')
    assert with_prefill(plan, "12600").measure.prefill.prompt_tokens == (12600,)
    with pytest.raises(RecipeError) as e:
        with_prefill(plan, "4096")
    assert e.value.key == "measure.target_measures[0]" and "prefill override: 4096" in str(e.value)


def test_lab_plan_takes_the_prefill_parameter():
    assert lab.plan("sim", prefill="4096").measure.prefill.prompt_tokens == (4096,)
    assert lab.plan("sim").measure.prefill.prompt_tokens == (4096, 12600)
