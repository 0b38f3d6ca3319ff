"""`[measure.interference]` (docs/measurement.md, "Prefill under decode"): checked when the recipe is read, naming
the file and the key; streams that cannot run beside an arrival, or prompts the window cannot hold, are refused;
absent, the plan, its hash and its description are what they were."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from labkit.errors import RecipeError
from labkit.recipe import InterferencePlan, describe_plan, load_recipe

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
"""


def recipe(tmp_path: Path, extra: str = "", args: str = "", name: str = "lane") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(BASE.format(extra=extra, args=args)))
    return folder


def test_absent_the_plan_and_its_hash_are_what_they_were(tmp_path):
    plain = load_recipe(recipe(tmp_path)).resolve({"spec": "none"})
    asked = load_recipe(recipe(tmp_path, "[measure.interference]\nprompt_tokens = [2048]", name="asked"))
    plan = asked.resolve({"spec": "none"})
    assert "interference" not in plain.resolved["measure"] and "arrive" not in describe_plan(plain)
    assert plan.measure.workloads["interference"] == InterferencePlan((2048,))
    assert plan.recipe_hash != plain.recipe_hash
    assert "2 streams decode 512 tokens; past 32 each, 3 prompts of 2,048 tokens arrive 1 s apart" in (
        describe_plan(plan)
    )
    assert plan.measure.workloads["interference"].requests() == 5


@pytest.mark.parametrize(
    ("extra", "key", "words"),
    [
        ("[measure.interference]\nstreams = 2", "measure.interference.prompt_tokens", "required"),
        ("[measure.interference]\nprompt_tokens = []", "measure.interference.prompt_tokens", "empty"),
        ("[measure.interference]\nprompt_tokens = [8]", "measure.interference.prompt_tokens[0]", ""),
        ("[measure.interference]\nprompt_tokens = [64]\nspacing_s = 0", "measure.interference.spacing_s", ""),
        ("[measure.interference]\nprompt_tokens = [64]\nburst = 3", "measure.interference.burst", ""),
        (
            "[measure.interference]\nprompt_tokens = [64]\nwarm_tokens = 64\nstream_tokens = 64",
            "measure.interference.warm_tokens",
            "below stream_tokens",
        ),
    ],
)
def test_bad_keys_name_the_file_and_key(tmp_path, extra, key, words):
    folder = recipe(tmp_path, extra)
    with pytest.raises(RecipeError) as e:
        load_recipe(folder).resolve({"spec": "none"})
    assert str(folder / "recipe.toml") in str(e.value) and key in str(e.value) and words in str(e.value)


@pytest.mark.parametrize(
    ("args", "extra", "key", "words"),
    [
        ('"--max-num-seqs" = 2', "streams = 2", "measure.interference.streams", "cap of 2"),
        ('"--max-model-len" = 4096', "", "measure.interference.prompt_tokens[1]", "8,192 prompt tokens"),
        ('"--context-length" = 4096', "", "measure.interference.prompt_tokens[1]", "--context-length"),
        ('"--max-model-len" = 4096', "stream_tokens = 8000", "measure.interference.stream_tokens", "4,096"),
    ],
)
def test_what_the_engine_cannot_hold_is_refused(tmp_path, args, extra, key, words):
    table = f"[measure.interference]\nprompt_tokens = [1024, 8192]\n{extra}"
    folder = recipe(
        tmp_path,
        table if "stream_tokens" not in extra else table.replace("8192", "2048"),
        f"[engine.args]\n{args}",
    )
    with pytest.raises(RecipeError) as e:
        load_recipe(folder)
    assert key in str(e.value) and words in str(e.value)


def test_a_cached_context_is_in_the_line_the_count_and_the_window_check(tmp_path):
    table = "[measure.interference]\nprompt_tokens = [1024]\ncontext_tokens = 32768"
    plan = load_recipe(recipe(tmp_path, table)).resolve({"spec": "none"})
    p = plan.measure.workloads["interference"]
    assert p.context_tokens == 32768 and p.requests() == 2 + 3 + 1  # the context's load request
    assert "prompts of 1,024 new tokens after 32,768 cached arrive" in describe_plan(plan)
    short = recipe(tmp_path, table, '[engine.args]\n"--max-model-len" = 32768', name="short")
    with pytest.raises(RecipeError, match=r"prompt_tokens\[0\].*32,768 cached context tokens \+ 1,024"):
        load_recipe(short)
