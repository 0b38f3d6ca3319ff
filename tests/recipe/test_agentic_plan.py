"""`[measure.agentic]` and `measure.idle_s` (docs/measurement.md, "Agentic sessions", "Idle turns"): checked when
the recipe is read, naming the file and the key; absent, the plan, its hash and its description are what they
were."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from labkit.errors import RecipeError
from labkit.recipe import describe_plan, load_recipe
from labkit.recipe.sessionplan import AgenticPlan

BASE = """
[model]
repo = "org/model"
[engine]
kind = "sim"
[measure]
decode = {{ concurrency = [1], turns = 3, output_tokens = 32, warmup = 0 }}
{extra}
[variants.spec.none]
[variants.spec.agent]
measure.agentic = {{ turns = 5, sessions = 2 }}
measure.idle_s = [60]
"""


def recipe(tmp_path: Path, extra: str = "", name: str = "lane") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(BASE.format(extra=extra)))
    return folder


def test_no_sessions_is_the_plan_it_was(tmp_path):
    plain = load_recipe(recipe(tmp_path, name="a")).resolve({"spec": "none"})
    assert plain.measure.agentic is None and plain.measure.idle_s == ()
    assert "agentic" not in plain.resolved["measure"] and "idle_s" not in plain.resolved["measure"]
    empty = load_recipe(recipe(tmp_path, "idle_s = []", name="b")).resolve({"spec": "none"})
    assert empty.recipe_hash == load_recipe(recipe(tmp_path, name="b")).resolve({"spec": "none"}).recipe_hash
    assert "agentic" not in describe_plan(plain) and "\nidle " not in describe_plan(plain)


def test_the_table_and_a_variant_make_the_plan(tmp_path):
    rec = load_recipe(recipe(tmp_path, "[measure.agentic]\ntool_tokens = 2000\nanswer_tokens = 16"))
    own, agent = rec.resolve({"spec": "none"}), rec.resolve({"spec": "agent"})
    assert own.measure.agentic == AgenticPlan(turns=3, tool_tokens=2000, answer_tokens=16, sessions=1)
    assert agent.measure.agentic == AgenticPlan(turns=5, tool_tokens=2000, answer_tokens=16, sessions=2)
    assert agent.measure.idle_s == (60,) and agent.recipe_hash != own.recipe_hash
    assert agent.measure.agentic.requests() == 10
    text = describe_plan(agent)
    assert "2 sessions at once x 1, 5 turns, ~2000-token tool results, 16-token answers" in text
    assert "one request after 60 s of idle engine" in text


@pytest.mark.parametrize(
    "extra,key,words",
    [
        ("agentic = { sessions = 3 }", "measure.agentic.sessions", "must be one of 1, 2, got 3"),
        ("agentic = { turns = 1 }", "measure.agentic.turns", ">= 2"),
        ("agentic = { tool_token = 5 }", "measure.agentic.tool_token", "did you mean 'tool_tokens'"),
        ("agentic = { answer_tokens = 1 }", "measure.agentic.answer_tokens", ">= 2"),
        ("idle_s = [0]", "measure.idle_s[0]", ">= 1"),
        ("idle_s = [60, 60]", "measure.idle_s", ""),
        ('idle_s = "60"', "measure.idle_s", "expected an array"),
        ('api = "completions"\nagentic = {}', "measure.agentic", 'measure.api = "chat"'),
    ],
)
def test_a_bad_value_names_the_file_and_the_key(tmp_path, extra, key, words):
    folder = recipe(tmp_path, extra)
    with pytest.raises(RecipeError) as err:
        load_recipe(folder).resolve({"spec": "none"})
    message = str(err.value)
    assert str(folder / "recipe.toml") in message or "recipe.toml" in message
    assert key in message and words in message


def test_the_agentic_override_keeps_the_recipes_keys_and_is_checked(tmp_path):
    from labkit.recipe import with_agentic

    folder = recipe(tmp_path, "[measure.agentic]\ntool_tokens = 300")
    plan = load_recipe(folder).resolve({"spec": "none"})
    longer = with_agentic(plan, 6)  # papermill's `-p agentic 6` is an int
    assert longer.measure.agentic == AgenticPlan(turns=6, tool_tokens=300, answer_tokens=32, sessions=1)
    assert longer.resolved["measure"]["agentic"]["turns"] == 6 and longer.recipe_hash != plan.recipe_hash
    assert with_agentic(plan, "4").measure.agentic.turns == 4 and plan.measure.agentic.turns == 3
    none = with_agentic(plan, 0)
    assert none.measure.agentic is None and "agentic" not in none.resolved["measure"]
    with pytest.raises(RecipeError) as e:
        with_agentic(plan, "many")
    assert str(folder / "recipe.toml") in str(e.value) and "measure.agentic.turns" in str(e.value)
    assert "agentic override: many" in str(e.value)
    import dataclasses

    prompts = dataclasses.replace(plan, measure=dataclasses.replace(plan.measure, api="completions"))
    with pytest.raises(RecipeError, match=r'measure.agentic: .*measure.api = "chat" \(agentic override: 2\)'):
        with_agentic(prompts, 2)
