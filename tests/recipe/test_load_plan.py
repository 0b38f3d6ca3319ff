"""`[measure.load]` and `[measure.slo]` (labkit/recipe/loadplan.py;
docs/measurement.md, "Load levels and arrival schedules"): their keys' defaults, the plans they make, and every
hostile value or combination refused naming the key: the fields, plans and rules called directly on a minimal
merged recipe, then whole recipes, whose errors name the file and the key."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import pytest

import labkit.recipe.schema as s
from labkit.errors import RecipeError
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan, describe_plan, load_recipe
from labkit.recipe.loadplan import (
    ARRIVALS,
    LOAD_TABLE,
    SLO_TABLE,
    LoadPlan,
    SloPlan,
    check_load,
    check_slo,
    running_cap,
)
from labkit.recipe.workloads import WORKLOAD_TABLES

pytestmark = pytest.mark.pure

PLAN = MeasurePlan("chat", 1, DecodePlan((1,), 3, 32, 0), PrefillPlan((128,), 1), 60.0)


def load_table(raw: dict[str, Any]) -> dict[str, Any]:
    """[measure.load] checked as a whole recipe's is: every key's type and range, defaults filled in."""
    return LOAD_TABLE.field(False).check(raw, "measure.load")


def slo_table(raw: dict[str, Any]) -> dict[str, Any]:
    return SLO_TABLE.field(False).check(raw, "measure.slo")


def merged(
    load: dict[str, Any] | None = None,
    slo: dict[str, Any] | None = None,
    args: dict[str, Any] | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """The parts of a merged recipe the two rules read."""
    measure: dict[str, Any] = {"timeout": timeout}
    if load is not None:
        measure["load"] = load_table(load)
    if slo is not None:
        measure["slo"] = slo_table(slo)
    return {"measure": measure, "engine": {"args": args or {}}}


def refusal(check, *args) -> s.Invalid:
    with pytest.raises(s.Invalid) as e:
        check(*args)
    return e.value


def test_registered_with_the_load_workload():
    assert WORKLOAD_TABLES["load"] is LOAD_TABLE and WORKLOAD_TABLES["slo"] is SLO_TABLE


def test_the_recipe_offers_the_arrivals_the_schedule_draws():
    from labkit.measure.request.arrivals import ARRIVALS as DRAWN

    assert ARRIVALS == DRAWN


def test_a_closed_loop_and_its_defaults():
    table = load_table({"concurrency": [1, 2, 4], "requests": 20})
    check_load(merged({"concurrency": [1, 2, 4], "requests": 20}))
    plan = LOAD_TABLE.plan(table)
    assert plan == LoadPlan(concurrency=(1, 2, 4), level_requests=20)
    assert (plan.arrival, plan.burstiness, plan.max_concurrency, plan.duration_s) == (None, None, None, None)
    assert (plan.prompt_tokens, plan.output_tokens, plan.shared_prefix_tokens, plan.warmup) == (
        512,
        128,
        0,
        1,
    )
    assert (plan.ramp_up_s, plan.max_error_share, plan.stall_s) == (0.0, 0.01, 30.0)
    assert (plan.lateness_floor_ms, plan.lateness_share) == (1.0, 0.05)
    assert plan.closed and plan.levels == (1, 2, 4) and plan.requests() == 3 * (20 + 1)
    by_time = LOAD_TABLE.plan(load_table({"concurrency": [8], "duration_s": 30}))
    assert by_time.requests() is None  # the engine's speed sets a closed level's count
    rows = dict(LOAD_TABLE.rows(plan, PLAN))
    assert rows["load"] == "closed loop at c1, c2, c4, 20 requests per level, 1 warmup each"
    assert rows["load requests"] == "512-token prompts (0 shared), 128-token answers"
    assert rows["load checks"] == (
        "over 1 % failed, cut or timed-out requests invalidate a level; a stream silent for 30 s is cut"
    )


def test_an_open_loop_takes_poisson_unless_told_and_gamma_takes_burstiness_one():
    raw = {"rate": [0.5, 2], "duration_s": 60}
    check_load(merged(raw))
    plan = LOAD_TABLE.plan(load_table(raw))
    assert plan.rate == (0.5, 2.0) and plan.arrival == "poisson" and plan.burstiness is None
    assert not plan.closed and plan.levels == (0.5, 2.0)
    assert plan.requests() == (30 + 1) + (120 + 1)  # R·D sends (expected; exact when constant) + warmup
    ramped = LOAD_TABLE.plan(load_table({**raw, "ramp_up_s": 10}))
    assert ramped.requests() == (28 + 1) + (110 + 1)  # the steady schedule is ramp/2 shorter: ceil(R · 55)
    gamma = LOAD_TABLE.plan(load_table({**raw, "arrival": "gamma"}))
    assert gamma.burstiness == 1.0
    bursty = {"rate": [4], "requests": 100, "arrival": "gamma", "burstiness": 0.5, "max_concurrency": 16}
    check_load(merged(bursty))
    plan = LOAD_TABLE.plan(load_table(bursty))
    assert (plan.arrival, plan.burstiness, plan.max_concurrency) == ("gamma", 0.5, 16)
    assert plan.requests() == 101
    rows = dict(LOAD_TABLE.rows(plan, PLAN))
    assert rows["load"] == (
        "open loop at 4 req/s, gamma (burstiness 0.5) arrivals, at most 16 in flight, 100 requests per level, "
        "1 warmup each"
    )
    assert rows["load checks"].endswith("; client-bound when lateness p99 > max(1 ms, 5 % of the mean gap)")


def test_the_slo_plan_and_its_line():
    raw = {"ttft_s": 1.5, "tpot_s": 0.015}
    check_slo(merged({"concurrency": [1], "requests": 4}, raw))
    plan = SLO_TABLE.plan(slo_table(raw))
    assert plan == SloPlan(ttft_s=1.5, tpot_s=0.015, e2e_s=None, percentile=99.0)
    assert plan.bounds() == (("ttft", 1.5), ("tpot", 0.015))
    assert SLO_TABLE.rows(plan, PLAN) == [
        ("slo", "p99 TTFT <= 1.5 s, TPOT <= 0.015 s; a level meets it when every given bound holds")
    ]
    assert SLO_TABLE.plan(slo_table({"e2e_s": 20, "percentile": 99.9})).bounds() == (("e2e", 20.0),)


@pytest.mark.parametrize(
    "raw,key,words",
    [
        ({"rate": [1, 0]}, "measure.load.rate[1]", "> 0"),
        ({"rate": [1, -2.5]}, "measure.load.rate[1]", "got -2.5"),
        ({"rate": [1, math.nan]}, "measure.load.rate[1]", "got nan"),
        ({"rate": [math.inf]}, "measure.load.rate[0]", "got inf"),
        ({"rate": [True]}, "measure.load.rate[0]", "expected a number"),
        ({"rate": [2, 2.0]}, "measure.load.rate[1]", "duplicate"),
        ({"rate": []}, "measure.load.rate", "empty"),
        ({"concurrency": []}, "measure.load.concurrency", "empty"),
        ({"concurrency": [1, 0]}, "measure.load.concurrency[1]", ">= 1"),
        ({"concurrency": [1.5]}, "measure.load.concurrency[0]", "integer"),
        ({"arrival": "bursty"}, "measure.load.arrival", "gamma"),
        ({"burstiness": 0}, "measure.load.burstiness", ">= 0.01"),
        ({"burstiness": math.nan}, "measure.load.burstiness", "nan"),
        ({"max_concurrency": 0}, "measure.load.max_concurrency", ">= 1"),
        ({"duration_s": 0}, "measure.load.duration_s", "> 0"),
        ({"duration_s": math.inf}, "measure.load.duration_s", "inf"),
        ({"requests": 0}, "measure.load.requests", ">= 1"),
        ({"prompt_tokens": 4}, "measure.load.prompt_tokens", ">= 8"),
        ({"shared_prefix_tokens": -1}, "measure.load.shared_prefix_tokens", ">= 0"),
        ({"ramp_up_s": -1}, "measure.load.ramp_up_s", ">= 0"),
        ({"max_error_share": 1}, "measure.load.max_error_share", "< 1"),
        ({"stall_s": 0}, "measure.load.stall_s", "> 0"),
        ({"lateness_floor_ms": 0}, "measure.load.lateness_floor_ms", "> 0"),
        ({"lateness_share": 1}, "measure.load.lateness_share", "< 1"),
        ({"rates": [1]}, "measure.load.rates", "did you mean 'rate'"),
    ],
)
def test_a_bad_load_value_is_refused_naming_its_key(raw, key, words):
    e = refusal(load_table, raw)
    assert e.key == key and words in e.message


@pytest.mark.parametrize(
    "raw,key,words",
    [
        ({"ttft_s": 0}, "measure.slo.ttft_s", "> 0"),
        ({"tpot_s": -0.01}, "measure.slo.tpot_s", "> 0"),
        ({"e2e_s": math.nan}, "measure.slo.e2e_s", "nan"),
        ({"ttft_s": 1, "percentile": 100}, "measure.slo.percentile", "< 100"),
        ({"ttft_s": 1, "percentile": 0}, "measure.slo.percentile", "> 0"),
        ({"ttft": 1}, "measure.slo.ttft", "did you mean 'ttft_s'"),
    ],
)
def test_a_bad_slo_value_is_refused_naming_its_key(raw, key, words):
    e = refusal(slo_table, raw)
    assert e.key == key and words in e.message


CLOSED = {"concurrency": [1, 8, 32], "requests": 64}
OPEN = {"rate": [1, 2], "duration_s": 30}
SESSIONS = {"sessions": [2, 4], "turns": 3}


@pytest.mark.parametrize(
    "load,key,words",
    [
        ({**CLOSED, "rate": [1]}, "measure.load.rate", "one kind per recipe"),
        ({"requests": 10}, "measure.load", "needs concurrency (closed-loop levels), rate"),
        ({**SESSIONS, "concurrency": [1]}, "measure.load.sessions", "one kind per recipe"),
        ({**SESSIONS, "arrival": "poisson"}, "measure.load.arrival", "these levels are agentic sessions"),
        ({**SESSIONS, "requests": 10}, "measure.load.requests", "sessions x turns requests"),
        ({**SESSIONS, "duration_s": 10}, "measure.load.duration_s", "lasts its sessions' turns"),
        ({**SESSIONS, "shared_prefix_tokens": 16}, "measure.load.shared_prefix_tokens", "nonce of its own"),
        ({**SESSIONS, "profile": "sweep"}, "measure.load.profile", "levels or capacity"),
        ({**CLOSED, "think_s": 2}, "measure.load.think_s", "only agentic levels"),
        ({**OPEN, "turns": 3}, "measure.load.turns", "only agentic levels"),
        ({**CLOSED, "arrival": "poisson"}, "measure.load.arrival", "only an open loop"),
        ({**CLOSED, "max_concurrency": 4}, "measure.load.max_concurrency", "only an open loop"),
        ({**CLOSED, "burstiness": 2}, "measure.load.burstiness", "only an open loop"),
        ({**OPEN, "burstiness": 2}, "measure.load.burstiness", "arrival is poisson (the default)"),
        ({**OPEN, "arrival": "constant", "burstiness": 2}, "measure.load.burstiness", "arrival is constant"),
        ({**OPEN, "requests": 100}, "measure.load.requests", "not both"),
        ({"rate": [1]}, "measure.load", "needs duration_s or requests"),
        (
            {**CLOSED, "requests": 16},
            "measure.load.requests",
            "16 requests per level cannot keep the 32 streams",
        ),
        ({**OPEN, "ramp_up_s": 30}, "measure.load.ramp_up_s", "not below the level's duration_s (30 s)"),
        (
            {**OPEN, "shared_prefix_tokens": 512},
            "measure.load.shared_prefix_tokens",
            "not below prompt_tokens",
        ),
        ({**OPEN, "stall_s": 600}, "measure.load.stall_s", "not below measure.timeout (600 s)"),
    ],
)
def test_a_broken_load_combination_is_refused_naming_the_key(load, key, words):
    e = refusal(check_load, merged(load))
    assert e.key == key and words in e.message


@pytest.mark.parametrize(
    "args",
    [
        {"--max-num-seqs": 16},
        {"--max-num-seqs": "16"},
        {"--max_num_seqs": 16},
        {"--max-running-requests": 16},
    ],
)
def test_a_level_over_the_engines_running_cap_is_refused_naming_the_key_and_the_flag(args):
    e = refusal(check_load, merged(CLOSED, args=args))
    flag = next(iter(args))
    assert e.key == "measure.load.concurrency[2]"
    assert f"32 streams, over the engine's cap of 16 running requests (engine.args {flag})" in e.message
    assert running_cap(args) == (flag, 16)
    check_load(merged({**CLOSED, "concurrency": [1, 8, 16]}, args=args))  # at the cap: allowed
    check_load(merged({**OPEN, "max_concurrency": 64}, args=args))  # an open loop queues by design
    assert running_cap({"--max-model-len": 4096, "--max-num-seqs": True}) is None


def test_a_request_longer_than_the_context_window_is_refused():
    load = {**OPEN, "prompt_tokens": 4000, "output_tokens": 200}
    e = refusal(check_load, merged(load, args={"--max-model-len": 4096}))
    assert e.key == "measure.load.prompt_tokens"
    assert "4,000 prompt + 200 answer tokens = 4,200, over the context window of 4,096" in e.message
    check_load(merged(load, args={"--max-model-len": "8192"}))


def test_an_slo_needs_a_bound_and_load_levels_to_judge():
    e = refusal(check_slo, merged(CLOSED, {"percentile": 90}))
    assert e.key == "measure.slo" and "states no bound: give ttft_s, tpot_s or e2e_s" in e.message
    e = refusal(check_slo, merged(None, {"ttft_s": 2}))
    assert e.key == "measure.slo" and "needs [measure.load]" in e.message
    check_slo(merged(None, None))  # unset: nothing to check
    check_load(merged(None, None))


BASE = """
[model]
repo = "org/model"
[engine]
kind = "sim"
{args}
[measure]
decode = {{ concurrency = [1], turns = 3, output_tokens = 32, warmup = 0 }}
{extra}
"""


def recipe(tmp_path: Path, extra: str, args: str = "", name: str = "lane") -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "recipe.toml").write_text(textwrap.dedent(BASE.format(extra=extra, args=args)))
    return folder


def test_the_tables_make_the_plan_and_its_lines(tmp_path):
    extra = "[measure.load]\nconcurrency = [1, 2]\nrequests = 8\n[measure.slo]\nttft_s = 0.5"
    plan = load_recipe(recipe(tmp_path, extra)).resolve({})
    assert LOAD_TABLE.of(plan.measure) == LoadPlan(concurrency=(1, 2), level_requests=8)
    assert SLO_TABLE.of(plan.measure) == SloPlan(ttft_s=0.5)
    text = describe_plan(plan)
    assert "closed loop at c1, c2, 8 requests per level" in text and "p99 TTFT <= 0.5 s" in text
    unset = load_recipe(recipe(tmp_path, "", name="plain")).resolve({})
    assert "load" not in unset.resolved["measure"] and LOAD_TABLE.of(unset.measure) is None


@pytest.mark.parametrize(
    "extra,args,key,words",
    [
        ("[measure.load]\nrate = [1, nan]\nrequests = 10", "", "measure.load.rate[1]", "got nan"),
        ("[measure.load]\nrate = [1, -1]\nrequests = 10", "", "measure.load.rate[1]", "> 0"),
        ("[measure.load]\nrate = [inf]\nrequests = 10", "", "measure.load.rate[0]", "got inf"),
        (
            "[measure.load]\nconcurrency = [4, 64]\nrequests = 64",
            '[engine.args]\n"--max-num-seqs" = 32',
            "measure.load.concurrency[1]",
            "--max-num-seqs",
        ),
        (
            "[measure.load]\nrate = [1]\nrequests = 4\n[measure.slo]\nttft_s = 0",
            "",
            "measure.slo.ttft_s",
            "> 0",
        ),
    ],
)
def test_a_hostile_plan_names_the_file_and_key(tmp_path, extra, args, key, words):
    folder = recipe(tmp_path, extra, args)
    with pytest.raises(RecipeError) as e:
        load_recipe(folder)
    text = str(e.value)
    assert str(folder / "recipe.toml") in text and key in text and words in text


def test_variants_may_pick_the_kind_of_level(tmp_path):
    """The rule runs on the merged recipe, so the base may leave the kind of level to its variants."""
    extra = (
        "[measure.load]\nduration_s = 20\n"
        "[variants.load.closed]\nmeasure.load = { concurrency = [1, 4] }\n"
        "[variants.load.open]\nmeasure.load = { rate = [2], arrival = 'constant' }"
    )
    rec = load_recipe(recipe(tmp_path, extra))
    closed, opened = rec.resolve({"load": "closed"}), rec.resolve({"load": "open"})
    assert LOAD_TABLE.of(closed.measure) == LoadPlan(concurrency=(1, 4), duration_s=20.0)
    assert LOAD_TABLE.of(opened.measure) == LoadPlan(rate=(2.0,), arrival="constant", duration_s=20.0)
    assert LOAD_TABLE.of(opened.measure).requests() == 40 + 1


@pytest.mark.parametrize(
    "extra, key, words",
    [
        (
            '[measure.load]\nconcurrency = [1, 4]\nrequests = 8\nprofile = "capacity"',
            "measure.load.profile",
            "needs one",
        ),
        (
            '[measure.load]\nconcurrency = [4]\nrequests = 8\nprofile = "capacity"\n[measure.slo]\nttft_s = 1',
            "measure.load.profile",
            "at least two",
        ),
        (
            '[measure.load]\nconcurrency = [4, 1]\nrequests = 8\nprofile = "capacity"\n[measure.slo]\nttft_s = 1',
            "measure.load.profile",
            "lowest first",
        ),
        (
            '[measure.load]\nrate = [1]\nrequests = 8\nprofile = "sweep"',
            "measure.load.profile",
            "needs concurrency",
        ),
        (
            "[measure.load]\nconcurrency = [4]\nrequests = 8\nsweep_rates = 3",
            "measure.load.sweep_rates",
            "only",
        ),
        (
            '[measure.load]\nconcurrency = [4]\nrequests = 8\nprofile = "ladder"',
            "measure.load.profile",
            "ladder",
        ),
    ],
)
def test_a_profile_without_what_it_needs_is_refused_naming_the_key(tmp_path, extra, key, words):
    folder = recipe(tmp_path, extra)
    with pytest.raises(RecipeError) as e:
        load_recipe(folder)
    text = str(e.value)
    assert str(folder / "recipe.toml") in text and key in text and words in text


def test_the_profiles_make_their_plans_and_lines(tmp_path):
    sweep = '[measure.load]\nconcurrency = [16]\nrequests = 32\nprofile = "sweep"\nsweep_rates = 4'
    plan = load_recipe(recipe(tmp_path, sweep)).resolve({})
    p = LOAD_TABLE.of(plan.measure)
    assert p is not None and (p.profile, p.sweep_rates, p.arrival, p.requests()) == ("sweep", 4, None, None)
    assert "sweep: c1, c16, then 4 constant rates between their request rates" in describe_plan(plan)
    cap = '[measure.load]\nrate = [1, 2, 4]\nrequests = 8\nprofile = "capacity"\n[measure.slo]\nttft_s = 1'
    plan = load_recipe(recipe(tmp_path, cap, name="cap")).resolve({})
    assert "ladder 1/s, 2/s, 4/s to the first miss, then bisection to 10 % of the rate" in describe_plan(plan)


def test_session_levels_and_their_defaults():
    table = load_table({"sessions": [2, 8], "think_s": 1.5, "think": "exponential"})
    check_load(merged({"sessions": [2, 8], "think_s": 1.5, "think": "exponential"}))
    plan = LOAD_TABLE.plan(table)
    assert (plan.loop, plan.levels, plan.closed) == ("sessions", (2, 8), False)
    assert (plan.turns, plan.tool_tokens, plan.think_s, plan.think) == (4, 256, 1.5, "exponential")
    assert plan.requests() == (2 + 8) * 4 + 2 * plan.warmup  # every session's turns, and the warm-ups
    assert (plan.arrival, plan.duration_s, plan.level_requests) == (None, None, None)
    assert LOAD_TABLE.plan(load_table({"concurrency": [2], "requests": 4})).loop == "closed"
    assert LOAD_TABLE.plan(load_table({"rate": [2], "requests": 4})).loop == "open"


def test_a_session_level_over_the_running_cap_or_whose_last_turn_outgrows_the_window_is_refused():
    e = refusal(check_load, merged({**SESSIONS, "sessions": [2, 32]}, args={"--max-num-seqs": 16}))
    assert e.key == "measure.load.sessions[1]" and "32 sessions, over the engine's cap of 16" in e.message
    load = {**SESSIONS, "prompt_tokens": 1000, "output_tokens": 100, "tool_tokens": 500}
    e = refusal(check_load, merged(load, args={"--max-model-len": 2048}))
    assert e.key == "measure.load.prompt_tokens"
    assert (
        "1,000 prompt + 100 answer tokens + 1,200 of 2 earlier turns' answers and tool results = 2,300"
        in (e.message)
    )
    check_load(merged(load, args={"--max-model-len": 2300}))


def test_a_length_range_is_checked_at_its_ends():
    plan = LOAD_TABLE.plan(load_table({**OPEN, "range_ratio": 0.5}))
    assert plan.range_ratio == 0.5 and LOAD_TABLE.plan(load_table(OPEN)).range_ratio == 0.0
    load = {**OPEN, "prompt_tokens": 2000, "output_tokens": 100, "range_ratio": 0.5}
    e = refusal(check_load, merged(load, args={"--max-model-len": 3000}))
    assert e.key == "measure.load.prompt_tokens" and "3,000 prompt + 150 answer tokens" in e.message
    e = refusal(check_load, merged({**load, "shared_prefix_tokens": 1000}))
    assert e.key == "measure.load.shared_prefix_tokens" and "range_ratio's 0.5 (1000)" in e.message
    e = refusal(check_load, merged({**SESSIONS, "range_ratio": 0.2}))
    assert e.key == "measure.load.range_ratio" and "not with measure.load.sessions" in e.message
    with pytest.raises(s.Invalid):
        load_table({**OPEN, "range_ratio": 1.0})
