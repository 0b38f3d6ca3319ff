"""`measure.content` (docs/measurement.md, "Prompt content"): the categories a plan measures, checked where
they enter, naming the file and key; absent, the plan, its hash and its description are what they were."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from labkit import lab
from labkit.errors import RecipeError
from labkit.recipe import describe_plan, load_recipe, with_content
from labkit.report.gate import added_workloads, gate, measure_plan, prompt_content
from tests.support.results import stored_run

BASE = """
[model]
repo = "org/model"
[engine]
kind = "sim"
[measure]
decode = {{ concurrency = [1], turns = 3, output_tokens = 32, warmup = 0 }}
{extra}
[variants.spec.none]
[variants.spec.code]
measure.content = ["code", "structured"]
"""


def recipe(tmp_path: Path, extra: str = "", name: str = "lane") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(BASE.format(extra=extra)))
    return folder


def test_no_content_is_the_plan_it_was(tmp_path):
    absent = load_recipe(recipe(tmp_path, name="a")).resolve({"spec": "none"})
    empty = load_recipe(recipe(tmp_path, "content = []", name="a")).resolve({"spec": "none"})
    assert absent.measure.content == empty.measure.content == ()
    assert "content" not in absent.resolved["measure"] and "content" not in empty.resolved["measure"]
    assert absent.recipe_hash == empty.recipe_hash
    assert describe_plan(absent) == describe_plan(empty) and "\ncontent " not in describe_plan(absent)
    assert absent.measure.headline_measures() == ("decode_c1", "prefill_4096", "prefill_12600")


def test_categories_from_the_recipe_and_a_variant(tmp_path):
    rec = load_recipe(recipe(tmp_path, 'content = ["prose"]'))
    prose, code = rec.resolve({"spec": "none"}), rec.resolve({"spec": "code"})
    assert prose.measure.content == ("prose",) and code.measure.content == ("code", "structured")
    assert prose.recipe_hash != code.recipe_hash
    assert code.measure.headline_measures() == (
        "decode_c1",
        "prefill_4096",
        "prefill_12600",
        "decode_c1@code",
        "decode_c1@structured",
    )
    assert "content        c1 on corpus prompts: code, structured, 3 turns each" in describe_plan(code)


@pytest.mark.parametrize(
    "extra, key, words",
    [
        ('content = ["prose", "cod"]', "measure.content[1]", "got 'cod' (did you mean 'code'?)"),
        ('content = ["code", "code"]', "measure.content[1]", "duplicate entry 'code'"),
        ('content = "code"', "measure.content", "expected an array, got a string"),
    ],
)
def test_a_bad_category_names_the_file_and_the_key(tmp_path, extra, key, words):
    with pytest.raises(RecipeError) as e:
        load_recipe(recipe(tmp_path, extra))
    text = str(e.value)
    assert "recipe.toml" in text and key in text and words in text
    assert "prose, code, structured, chat" in text or "duplicate" in text or "array" in text


def test_target_measures_may_name_a_category_the_plan_measures(tmp_path):
    ok = 'content = ["code"]\ntarget_ci = 0.05\ntarget_measures = ["decode_c1@code", "accept_length@code"]'
    plan = load_recipe(recipe(tmp_path, ok, name="ok")).resolve({"spec": "none"})
    assert plan.measure.ci_measures() == ("decode_c1@code", "accept_length@code")
    bad = 'content = ["code"]\ntarget_ci = 0.05\ntarget_measures = ["decode_c1@prose"]'
    with pytest.raises(RecipeError) as e:
        load_recipe(recipe(tmp_path, bad, name="bad"))
    assert "measure.target_measures[0]" in str(e.value) and "'decode_c1@prose' is not a measure" in str(
        e.value
    )


def test_a_content_override_that_leaves_a_target_measure_unmeasurable_is_refused(tmp_path):
    """-p content prose on a plan whose target is decode_c1@code would run to max_runs without ever meeting it."""
    ok = 'content = ["code"]\ntarget_ci = 0.05\ntarget_measures = ["decode_c1@code"]'
    plan = load_recipe(recipe(tmp_path, ok, name="t")).resolve({"spec": "none"})
    assert with_content(plan, "code, prose").measure.content == ("code", "prose")
    with pytest.raises(RecipeError) as e:
        with_content(plan, "prose")
    assert e.value.file.endswith("t/recipe.toml") and e.value.key == "measure.target_measures[0]"
    assert "content override: prose" in str(e.value)


def test_the_content_override_is_checked_like_the_key(tmp_path):
    plan = load_recipe(recipe(tmp_path)).resolve({"spec": "none"})
    both = with_content(plan, "prose, chat")
    assert both.measure.content == ("prose", "chat") and both.resolved["measure"]["content"] == [
        "prose",
        "chat",
    ]
    assert both.recipe_hash != plan.recipe_hash and plan.measure.content == ()
    assert with_content(both, "").recipe_hash == plan.recipe_hash  # none again: the plan as the recipe has it
    with pytest.raises(RecipeError) as e:
        with_content(plan, ["prose", "poetry"])
    assert "recipe.toml" in str(e.value) and "measure.content[1]" in str(e.value)
    assert "(content override: prose, poetry)" in str(e.value)


def test_the_notebook_api_takes_content_and_the_gate_lists_it_without_blocking():
    plan = lab.plan("sim", spec="dspark", content="code")
    assert plan.measure.content == ("code",) and lab.plan("sim").measure.content == ()
    docs = [
        stored_run({"plan": {"resolved": lab.plan("sim", spec="dspark").resolved}, "run_id": "a"}),
        stored_run({"plan": {"resolved": plan.resolved}, "run_id": "b"}),
    ]
    assert measure_plan(docs[0]) == measure_plan(docs[1])  # the other measures mean what they meant
    assert [prompt_content(d) for d in docs] == ["synthetic prose only", "code"]
    g = gate(docs[:1], docs[1:])
    item = next(i for i in g.items if i.fact == "prompt content")
    assert not item.blocking and item.b == ("code",) and "measurement plan" not in g.blocked


def test_added_workloads_are_listed_by_the_gate_without_blocking():
    """Sessions, idle turns and depths add measures in windows of their own: a lane with them is compared with
    one without on every other measure (this failed before: they entered the blocking measurement plan)."""
    plain = lab.plan("sim", spec="dspark")
    deep = lab.plan("sim", spec="dspark", depth="0,4096", agentic=3)
    docs = [
        stored_run({"plan": {"resolved": p.resolved}, "run_id": r}) for p, r in ((plain, "a"), (deep, "b"))
    ]
    assert measure_plan(docs[0]) == measure_plan(docs[1])
    assert added_workloads(docs[0]) == "none" and added_workloads(docs[1]).startswith(
        'agentic {"answer_tokens"'
    )
    g = gate(docs[:1], docs[1:])
    item = next(i for i in g.items if i.fact == "added workloads")
    assert not item.blocking and "depth" in item.b[0] and g.blocked == []
