"""The load override (the bench notebook's `load` parameter, `lab.plan(load=...)`): "1,2,4" streams or
"0.5/s,2/s" rates replacing `[measure.load]`'s levels, the recipe's other keys kept (the other kind's dropped), a
level length filled in when the recipe gives none, checked as the table is, naming the file, the key and the
override (docs/measurement.md, "Serving under load")."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from labkit.errors import RecipeError
from labkit.recipe import LOAD_TABLE, load_recipe, with_load

pytestmark = pytest.mark.pure

BASE = """
[model]
repo = "org/model"
[engine]
kind = "sim"
[engine.args]
"--max-num-seqs" = 16
[measure]
decode = {{ concurrency = [1], turns = 3, output_tokens = 32, warmup = 0 }}
{extra}
"""


def plan_of(tmp_path: Path, extra: str = ""):
    folder = tmp_path / "lane"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(BASE.format(extra=extra)))
    return load_recipe(folder).resolve({})


def test_streams_on_a_recipe_without_load_get_a_level_length_and_move_the_hash(tmp_path):
    plan = plan_of(tmp_path)
    loaded = with_load(plan, "1, 2, 8")
    p = LOAD_TABLE.of(loaded.measure)
    assert p is not None and p.concurrency == (1, 2, 8) and p.level_requests == 32  # 4 a stream at c8
    assert loaded.resolved["measure"]["load"]["concurrency"] == [1, 2, 8]
    assert loaded.recipe_hash != plan.recipe_hash and LOAD_TABLE.of(plan.measure) is None
    assert LOAD_TABLE.of(with_load(plan, 2).measure).level_requests == 16  # papermill's int; at least 16


def test_rates_replace_a_closed_loop_and_keep_the_recipes_other_keys(tmp_path):
    extra = "[measure.load]\nconcurrency = [4]\nduration_s = 20\nprompt_tokens = 256"
    p = LOAD_TABLE.of(with_load(plan_of(tmp_path, extra), "0.5/s,2/s").measure)
    assert p is not None and p.rate == (0.5, 2.0) and p.concurrency == () and p.arrival == "poisson"
    assert (p.duration_s, p.level_requests, p.prompt_tokens) == (20, None, 256)
    back = LOAD_TABLE.of(with_load(plan_of(tmp_path, extra), "2").measure)
    assert back is not None and back.concurrency == (2,) and back.duration_s == 20


def test_an_empty_override_removes_the_recipes_load(tmp_path):
    plan = with_load(plan_of(tmp_path, "[measure.load]\nconcurrency = [4]\nrequests = 8"), "")
    assert LOAD_TABLE.of(plan.measure) is None and "load" not in plan.resolved["measure"]


@pytest.mark.parametrize(
    "given, key, words",
    [
        ("1,0.5/s", "measure.load", "not mixed"),
        ("1,s2", "measure.load", "not mixed"),
        ("s0", "measure.load.sessions[0]", "got 0"),
        ("fast:1,2", "measure.load.profile", "'fast' is no profile"),
        ("capacity:1,2", "measure.load.profile", "needs one"),  # no [measure.slo] to judge by
        ("s4,s32", "measure.load.sessions[1]", "--max-num-seqs"),
        ("0/s", "measure.load.rate[0]", "got 0.0"),
        ("nan/s", "measure.load.rate[0]", "got nan"),
        ("-1", "measure.load.concurrency[0]", "got a string"),
        ("x", "measure.load.concurrency[0]", "got a string"),
        ("32", "measure.load.concurrency[0]", "--max-num-seqs"),  # over the engine's running cap
    ],
)
def test_a_bad_override_names_the_file_the_key_and_the_override(tmp_path, given, key, words):
    with pytest.raises(RecipeError) as e:
        with_load(plan_of(tmp_path), given)
    text = str(e.value)
    assert "lane/recipe.toml" in text and key in text and words in text and f"load override: {given}" in text


def test_sessions_replace_streams_and_drop_the_level_length(tmp_path):
    extra = "[measure.load]\nconcurrency = [4]\nrequests = 8\nprompt_tokens = 256"
    p = LOAD_TABLE.of(with_load(plan_of(tmp_path, extra), "s2, s8").measure)
    assert p is not None and p.loop == "sessions" and p.sessions == (2, 8) and p.concurrency == ()
    assert (p.level_requests, p.duration_s, p.prompt_tokens, p.turns) == (None, None, 256, 4)
    back = LOAD_TABLE.of(
        with_load(plan_of(tmp_path, "[measure.load]\nsessions = [2]\nturns = 3"), "4").measure
    )
    assert back is not None and back.concurrency == (4,) and back.sessions == () and back.turns == 4


def test_a_profile_word_runs_the_recipes_levels_or_its_own(tmp_path):
    extra = "[measure.load]\nconcurrency = [1, 4, 8]\nrequests = 16\n[measure.slo]\nttft_s = 2"
    p = LOAD_TABLE.of(with_load(plan_of(tmp_path, extra), "capacity").measure)
    assert p is not None and p.profile == "capacity" and p.concurrency == (1, 4, 8)
    p = LOAD_TABLE.of(with_load(plan_of(tmp_path, extra), "capacity:s1,s2,s4").measure)
    assert p is not None and p.profile == "capacity" and p.sessions == (1, 2, 4)
    p = LOAD_TABLE.of(with_load(plan_of(tmp_path, extra), "sweep:1,8").measure)
    assert p is not None and p.profile == "sweep" and p.concurrency == (1, 8) and p.sweep_rates == 5
