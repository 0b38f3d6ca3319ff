"""Sweep points (issue 18, the pure part): --over specs parsed, grids and zips expanded, each point resolved as
one more variant with its own id, and every bad key or value refused before anything boots, naming it."""

from __future__ import annotations

import pytest

from labkit.errors import RecipeError
from labkit.recipe import find_recipe, load_recipe
from labkit.recipe.sweep import expand, parse_over, resolve_point, short_name


def _sim():
    return load_recipe(find_recipe("sim"))


def test_parse_over_keys_values_and_short_names():
    a = parse_over('engine.args."--max-num-batched-tokens"=4096,8192,16384')
    assert a.key == ("engine", "args", "--max-num-batched-tokens") and a.values == (4096, 8192, 16384)
    assert a.short == "mnbt" and a.dotted == 'engine.args."--max-num-batched-tokens"'
    b = parse_over("measure.decode.output_tokens=64, 128")
    assert b.values == (64, 128) and b.short == "output-tokens"
    assert parse_over('engine.env.MODE="a b",fast,true').values == ("a b", "fast", True)
    assert short_name(["engine", "args", "--prefill-compute-share"]) == "pcs"


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("engine.args.--x", "expected KEY=V1,V2"),
        ('engine.args."--x=1', "unclosed quote"),
        ("engine..x=1", "empty part"),
        ("engine.args.x=a b", "is not a value"),
    ],
)
def test_bad_specs_name_the_spec(spec, says):
    with pytest.raises(RecipeError, match=says) as err:
        parse_over(spec)
    assert spec in str(err.value)


def test_grid_and_zip():
    a, b = parse_over("engine.args.x=1,2"), parse_over("engine.args.y=3,4")
    assert [tuple(v for _, v in p) for p in expand([a, b])] == [(1, 3), (1, 4), (2, 3), (2, 4)]
    assert [tuple(v for _, v in p) for p in expand([a, b], zipped=True)] == [(1, 3), (2, 4)]
    with pytest.raises(RecipeError, match="--zip needs the same number"):
        expand([a, parse_over("engine.args.y=3,4,5")], zipped=True)


def test_a_repeated_point_is_refused_but_a_zipped_axis_may_repeat_a_value():
    with pytest.raises(RecipeError, match="the point x=1 comes twice") as err:
        expand([parse_over("engine.args.x=1,1")])
    assert "engine.args.x=1,1" in str(err.value)
    a, b = parse_over('engine.args.x="",boom,""'), parse_over("engine.args.y=1,2,3")
    assert [tuple(v for _, v in p) for p in expand([a, b], zipped=True)] == [("", 1), ("boom", 2), ("", 3)]
    with pytest.raises(RecipeError, match="comes twice"):
        expand([a, parse_over("engine.args.y=1,2,1")], zipped=True)


def test_a_point_is_a_variant_with_its_own_id():
    (point,) = expand([parse_over('engine.args."--decode-tps"=42')])
    plan = resolve_point(_sim(), {"spec": "dspark"}, point)
    assert plan.variant_id == "spec-dspark_dt-42"
    assert plan.engine.arg("--decode-tps") == ("42",) and plan.engine.arg("--preset") == (
        "dsv41-stock-dspark",
    )
    (m,) = expand([parse_over("measure.decode.turns=2")])
    assert resolve_point(_sim(), {}, m).measure.decode.turns == 2  # a request-side point


@pytest.mark.parametrize(
    ("spec", "key", "says"),
    [
        ("engine.portt=1", "engine.portt", "did you mean 'port'"),
        ("measure.decode.turns=0", "--over measure.decode.turns", "expected an integer >= 1"),
        ("nosuch.key=1", "nosuch", "unknown key"),
    ],
)
def test_bad_points_fail_before_any_boot_naming_the_key(spec, key, says):
    (point,) = expand([parse_over(spec)])
    with pytest.raises(RecipeError, match=says) as err:
        resolve_point(_sim(), {}, point)
    assert key in str(err.value) and "recipe.toml" in str(err.value)


def test_a_named_axis_words_with_dots_and_negative_values():
    a = parse_over('ee2:engine.args."--enable-eplb"="true","false"')
    assert (a.short, a.key, a.values) == ("ee2", ("engine", "args", "--enable-eplb"), ("true", "false"))
    assert parse_over("engine.image=repo/img:a,dsv41.stock").values == ("repo/img:a", "dsv41.stock")
    (point,) = expand([parse_over("measure.decode.turns=-1")])
    assert point[0][1] == -1
    (p1, p2) = expand([parse_over('engine.args."--decode-tps"=-1,1')])
    assert resolve_point(_sim(), {}, p1).variant_id != resolve_point(_sim(), {}, p2).variant_id
    assert resolve_point(_sim(), {}, p1).variant_id.endswith("dt-neg1")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            'engine.args."--enable-prefix-caching"=true,false',
            "the false point would measure the engine's default",
        ),
        ('engine.args."--decode-tps"=nan', "not a finite number"),
        ('engine.args."--decode-tps"=1e400', "not a finite number"),
    ],
)
def test_values_that_would_measure_the_wrong_thing_are_refused(spec, says):
    with pytest.raises(RecipeError, match=says):
        parse_over(spec)
