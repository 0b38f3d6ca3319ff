"""labkit compare: the statistics against scipy's values (computed once, written here: scipy is not a
dependency), the verdict rules, the comparability gate, run selection and the CLI on stored runs."""

from __future__ import annotations

import json

import pytest

from labkit import report as rp
from labkit.cli.app import main
from labkit.store import ResultsStore
from tests.support.results import requests_for, sim_plan, stored_run

A = [50.1, 49.8, 50.3, 49.9, 50.0]
B = [51.6, 51.4, 51.9, 51.5, 51.7]


def test_welch_matches_scipy():
    # scipy.stats.ttest_ind(B, A, equal_var=False): t 13.151918984428644, p 1.0631402418817503e-06, df 8.0,
    # confidence_interval(0.95) = (1.3194624890333553, 1.8805375109666618)
    r = rp.compare.compare_values("decode_c1", A, B)
    assert r.test == "Welch t, 5 vs 5 runs"
    assert r.df == pytest.approx(8.0) and r.p == pytest.approx(1.0631402418817503e-06, rel=1e-6)
    assert r.lo == pytest.approx(1.3194624890333553, rel=1e-9) and r.hi == pytest.approx(1.8805375109666618)
    assert r.verdict == rp.compare.FASTER and r.rel == pytest.approx(1.60 / 50.02)


def test_paired_matches_scipy():
    # scipy.stats.ttest_rel(B, A): p 9.131480382512278e-07, CI (1.5122010966914918, 1.687798903308511)
    r = rp.compare.compare_values("decode_c1", A, B, pairs=True)
    assert r.test == "paired t on 5 pairs" and r.df == 4
    assert r.p == pytest.approx(9.131480382512278e-07, rel=1e-6)
    assert (r.lo, r.hi) == (pytest.approx(1.5122010966914918), pytest.approx(1.687798903308511))


def test_unequal_sizes_and_tost_match_scipy():
    a2, b2 = [10.0, 10.4, 9.7, 10.2, 9.9, 10.1], [10.05, 10.3, 9.9, 10.1, 10.0]
    # ttest_ind(b2, a2, equal_var=False): p 0.8708427396614229, df 8.378705022747118; TOST at ±5 % of
    # mean(a2) from scipy.stats.t.sf/cdf with that df: 0.0016866931456379938
    r = rp.compare.compare_values("decode_c1", a2, b2, margin=0.05)
    assert r.df == pytest.approx(8.378705022747118) and r.p == pytest.approx(0.8708427396614229)
    assert r.tost_p == pytest.approx(0.0016866931456379938, rel=1e-6)
    assert r.verdict == "equivalent within ±5 %"
    # the same runs with a 0.5 % margin cannot be shown equivalent: no detectable difference
    assert rp.compare.compare_values("decode_c1", a2, b2, margin=0.005).verdict == rp.compare.NO_DIFFERENCE


def test_direction_turns_the_verdict_for_times():
    assert rp.compare.direction("ttft_c1") == "lower" and rp.compare.direction("prefill_4096_ttft") == "lower"
    assert (
        rp.compare.direction("decode_c2_agg") == "higher" and rp.compare.direction("accept_length") == "none"
    )
    assert rp.compare.compare_values("ttft_c1", A, B).verdict == rp.compare.SLOWER  # higher TTFT is slower
    assert rp.compare.compare_values("accept_length", A, B).verdict == "higher"
    assert rp.compare.compare_values("decode_c1", B, A).verdict == rp.compare.SLOWER


def test_energy_per_token_is_better_when_lower():
    a = [0.100, 0.101, 0.099, 0.100, 0.102]
    b = [x * 1.5 for x in a]
    assert rp.compare.direction("energy_per_token_decode") == "lower"
    rise = rp.compare.compare_values("energy_per_token_decode", a, b)
    assert rise.verdict == rp.compare.WORSE and "(lower is better)" in rise.why  # was "higher": no direction
    assert rp.compare.compare_values("energy_per_token_prefill_4096", b, a).verdict == rp.compare.BETTER


def test_too_few_runs_no_values_and_zero_spread():
    few = rp.compare.compare_values("decode_c1", [50.0, 51.0], [52.0, 53.0, 54.0])
    assert (
        few.verdict == rp.compare.TOO_FEW
        and few.p is None
        and few.lo is None
        and "needs 3 on each side" in few.why
    )
    assert rp.compare.compare_values("decode_c1", [None, None], [1.0]).verdict == rp.compare.NO_VALUES
    same = rp.compare.compare_values("decode_c1", [50.0] * 3, [50.0] * 3)
    assert same.p == 1.0 and same.verdict.startswith("equivalent")
    apart = rp.compare.compare_values("decode_c1", [50.0] * 3, [51.0] * 3)
    assert apart.p == 0.0 and apart.verdict == rp.compare.FASTER
    with pytest.raises(ValueError, match="equal counts"):
        rp.compare.compare_values("decode_c1", [1.0, 2.0, 3.0], [1.0, 2.0], pairs=True)


# --- the gate ---------------------------------------------------------------------------------------------


def _doc(**over):
    plan = sim_plan().to_dict()
    doc = {
        "run_id": over.pop("run_id", "r1"),
        "simulated": True,
        "source": "measured",
        "labkit_version": "0.1.0",
        "provenance": {"engine_version": "0.33.0"},
        "plan": plan,
        "boot": {},
        "summary": {"measures": {}},
    }
    doc.update(over)
    return stored_run(doc)


def test_gate_lists_differences_and_blocks_sim_against_real():
    a = [_doc()]
    b = [_doc(run_id="r2", simulated=False, provenance={"engine_version": "0.34.0"}, labkit_version="0.2.0")]
    g = rp.gate.gate(a, b, [])
    facts = {i.fact: i for i in g.items}
    assert set(facts) == {"simulated", "engine version", "labkit version"}
    assert g.blocked == ["simulated"]
    assert facts["engine version"].a == ("0.33.0",) and facts["engine version"].b == ("0.34.0",)
    assert rp.gate.gate(a, [_doc(run_id="r3")], []).items == []


def test_gate_names_plan_keys_mixed_sides_recipe_keys_and_flags():
    a = [_doc()]
    other = sim_plan().to_dict()
    other["resolved"]["measure"]["decode"]["turns"] = 9
    other["resolved"]["engine"]["args"]["--preset"] = "other"
    b = [
        _doc(run_id="r2", plan=other),
        _doc(run_id="r3", plan=other, provenance={"engine_version": "0.34.0"}),
        _doc(
            run_id="r4",
            plan=other,
            summary={"flags": [{"code": "foreign-traffic", "window": "decode", "message": "3 foreign"}]},
        ),
    ]
    g = rp.gate.gate(a, b, expected=None)
    facts = {i.fact: i for i in g.items}
    assert facts["measurement plan"].a == ("decode.turns=4",) and facts["measurement plan"].b == (
        "decode.turns=9",
    )
    assert g.blocked == ["measurement plan"]
    assert facts["engine version"].note == "B mixes values"
    assert "engine.args.--preset" in facts["recipe content"].note
    assert "foreign-traffic in decode: 3 foreign" in facts["run flag (B r4)"].note
    expected = rp.gate.gate(a, b, expected=["engine.args.--preset"])
    assert "recipe content" not in {i.fact for i in expected.items}
    assert "engine.args.--preset" in {i.fact: i for i in expected.items}["varied axes"].note


def test_repetition_settings_are_not_the_measurement_plan():
    other = sim_plan().to_dict()
    other["resolved"]["measure"].update(runs=7, target_ci=0.02, max_runs=12)
    assert rp.gate.gate([_doc()], [_doc(run_id="r2", plan=other)], []).items == []


# --- stored runs, selection and the CLI ---------------------------------------------------------------------


def _store(root, run_id, decode, spec="none", seed=None, prefill=600.0, **more):
    prov = {"cold_expected": True, "engine_version": "0.33.0+labkit.sim"}
    if seed is not None:
        prov["prompt_seed"] = seed
    measures = {"decode_c1": decode, "prefill_4096": prefill, **more}
    with ResultsStore(root).new_run(sim_plan(spec), run_id=run_id) as run:
        run.write_requests(requests_for(run.run_id, tps=decode))
        run.finish({"measures": measures, "n_ok": 4}, provenance=prov)


@pytest.fixture()
def stored(tmp_path):
    root = tmp_path / "results"
    for i, (x, y) in enumerate(zip(A, B, strict=True)):
        _store(root, f"20261201T00000{i}Z-aaaaa{i}", x, seed=f"7/{i}")
        _store(root, f"20261201T00001{i}Z-bbbbb{i}", y, spec="dspark", seed=f"7/{i}", prefill=600.0 + i)
    return root


def test_selectors(stored):
    from labkit.store import load_results

    data = load_results(stored)
    assert rp.select(data, "sim/spec-none").run_ids == [f"20261201T00000{i}Z-aaaaa{i}" for i in range(5)]
    assert rp.select(data, "sim@spec=dspark").unit == "boots"
    assert rp.select(data, "20261201T000001Z-aaaaa1,20261201T000002Z-aaaaa2").run_ids[1].endswith("aaaaa2")
    with pytest.raises(rp.CompareError, match="2 lanes; pick one: sim/spec-dspark, sim/spec-none"):
        rp.select(data, "sim")
    with pytest.raises(rp.CompareError, match="no complete run '20261201T000001Z-aaaaa9'.*aaaaa1"):
        rp.select(data, "20261201T000001Z-aaaaa9")
    with pytest.raises(rp.CompareError, match="sim has variants: spec-dspark, spec-none"):
        rp.select(data, "sim/spec-eagle")
    with pytest.raises(rp.CompareError, match="no stored runs of recipe 'simm'.*did you mean 'sim'"):
        rp.select(data, "simm/spec-none")


def test_an_axis_selector_leaves_out_sweep_points_unless_it_names_their_axis(stored):
    from labkit.store import load_results

    point = sim_plan("none").to_dict() | {
        "variant_id": "spec-none_dt-20",
        "variants": {"spec": "none", "dt": "20"},
    }
    sweep = {"name": "sim/spec-none_over_dt", "axes": {"dt": ["engine", "args", "--decode-tps"]}}
    with ResultsStore(stored).new_run(point, run_id="20261201T000100Z-ccccc0") as run:
        run.finish({"measures": {"decode_c1": 20.0}, "n_ok": 4}, provenance={"sweep": sweep})
    data = load_results(stored)
    assert rp.select(data, "sim@spec=none").title.startswith("sim/spec-none (")  # was: "runs of 2 lanes"
    assert rp.select(data, "sim@dt=20").run_ids == ["20261201T000100Z-ccccc0"]
    assert rp.select(data, "sim/spec-none_dt-20").run_ids == ["20261201T000100Z-ccccc0"]


def test_cli_text_json_pairing_and_regression(stored, capsys):
    args = ["compare", "sim@spec=none", "sim@spec=dspark", "--results", str(stored)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "paired on 5 shared prompt seeds" in out and "| decode_c1" in out and "faster" in out
    assert "varied axes" in out and "engine.args.--preset" in out
    assert main([*args, "--json", "--measure", "decode_c1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [m["measure"] for m in doc["measures"]] == ["decode_c1"]
    assert doc["measures"][0]["test"] == "paired t on 5 pairs" and doc["gate"]["blocked"] == []
    # swapped, B is the slower lane: a 3 % slowdown fails a 2 % regression gate and passes a 5 % one
    swapped = ["compare", "sim@spec=dspark", "sim@spec=none", "--results", str(stored)]
    assert main([*swapped, "--fail-on-regression", "2"]) == 1
    assert "regression: decode_c1 -3.10 %" in capsys.readouterr().err
    assert main([*swapped, "--fail-on-regression", "5"]) == 0


def test_cli_fails_the_regression_gate_on_a_50_percent_energy_rise(tmp_path, capsys):
    root = tmp_path / "results"
    for i in range(5):
        joules = 0.100 + 0.001 * i
        _store(root, f"20261201T00000{i}Z-aaaaa{i}", 50.0, seed=f"7/{i}", energy_per_token_decode=joules)
        _store(
            root,
            f"20261201T00001{i}Z-bbbbb{i}",
            50.0,
            "dspark",
            f"7/{i}",
            energy_per_token_decode=joules * 1.5,
        )
    pick = ["--results", str(root), "--measure", "energy_per_token_decode", "--fail-on-regression", "10"]
    assert main(["compare", "sim@spec=none", "sim@spec=dspark", *pick]) == 1
    out, err = capsys.readouterr()
    assert "| energy_per_token_decode" in out and "energy_per_token_decode: worse" in out
    assert "regression: energy_per_token_decode +50.00 % (B worse than A beyond 10 %" in err
    assert main(["compare", "sim@spec=dspark", "sim@spec=none", *pick]) == 0  # B uses less energy
    assert "energy_per_token_decode: better" in capsys.readouterr().out


def test_cli_refuses_sim_against_real_unless_forced(stored, capsys):
    plan = {**sim_plan().to_dict(), "recipe": "real-lane", "variant_id": "default"}
    with ResultsStore(stored).new_run(plan, run_id="20261201T000100Z-ccccc1", simulated=False) as run:
        run.finish({"measures": {"decode_c1": 50.0}, "n_ok": 1}, provenance={"engine_version": "0.33.0"})
    args = ["compare", "sim@spec=none", "20261201T000100Z-ccccc1", "--results", str(stored)]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "not comparable: simulated: A simulated | B real" in err and "--force" in err
    assert main([*args, "--force"]) == 0
    out = capsys.readouterr().out
    assert "FORCED past: simulated" in out and "too few runs" in out


def test_unknown_measure_is_named(stored):
    with pytest.raises(rp.CompareError, match="'decode_c3' is in neither side's runs.*decode_c1"):
        from labkit import lab

        lab.compare("sim@spec=none", "sim@spec=dspark", measures=["decode_c3"], results=stored)


# --- many measures at once, the pairing reason, what an interval is over ------------------------------------

# five measures, no real difference but a -0.6 % in decode_c1 (p 0.039 on its own). reference:
# scipy.stats.ttest_ind(b, a, equal_var=False).pvalue per measure = 0.03895354692519877, 0.7740704442861069,
# 0.6938180149028803, 0.835244097495359, 1.0; statsmodels multipletests(ps, method="holm") gives decode_c1
# 0.19476773462599384 (the others 1.0)
FIVE = {
    "decode_c1": (A, [49.7, 49.5, 50.0, 49.6, 49.8]),
    "decode_c2_agg": ([90.2, 89.7, 90.5, 90.1, 89.9], [90.4, 89.8, 90.0, 90.3, 89.6]),
    "prefill_4096": ([600.0, 602.0, 598.0, 601.0, 599.0], [601.0, 599.5, 600.5, 598.5, 602.5]),
    "prefill_12600": ([580.0, 583.0, 579.0, 581.0, 582.0], [582.0, 579.5, 581.0, 580.5, 583.0]),
    "ttft_c1": ([0.050, 0.052, 0.049, 0.051, 0.050], [0.051, 0.049, 0.050, 0.052, 0.050]),
}


def test_the_regression_gate_decides_on_holm_corrected_figures(tmp_path, capsys):
    root = tmp_path / "results"
    for i in range(5):
        for tag, side, spec in (("a", 0, "none"), ("b", 1, "dspark")):
            values = {m: v[side][i] for m, v in FIVE.items()}
            decode, prefill = values.pop("decode_c1"), values.pop("prefill_4096")
            _store(root, f"20261201T0000{side}{i}Z-{tag * 5}{i}", decode, spec, prefill=prefill, **values)
    args = ["compare", "sim@spec=none", "sim@spec=dspark", "--results", str(root), "--margin", "0.005"]
    # alone, decode_c1 is significantly slower: the 0 % gate fails on it
    assert main([*args, "--measure", "decode_c1", "--fail-on-regression", "0"]) == 1
    assert "regression: decode_c1 -0.60 % (B slower than A beyond 0 %, p = 0.039)" in capsys.readouterr().err
    # one of five measures: after Holm's correction (p 0.195) it is not, and the gate passes
    assert main([*args, "--fail-on-regression", "0"]) == 0
    out, err = capsys.readouterr()
    assert "Family-wise correction: Holm over the 5 tested measures" in out and err == ""
    assert "decode_c1: no detectable difference — p = 0.039, Holm-adjusted over 5 measures p = 0.19" in out
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["correction"].startswith("Holm over the 5 tested measures")
    first = doc["measures"][0]
    assert first["p_adj"] == pytest.approx(0.19476773462599384, rel=1e-6) and first["family"] == 5


def test_a_repeated_prompt_seed_is_the_reason_given_for_welch(tmp_path):
    from labkit import lab

    root = tmp_path / "results"
    seeds = ["7/0", "7/1", "7/1"]  # both sides ran the same seeds, but 7/1 twice: no one-to-one pairs
    for i, seed in enumerate(seeds):
        _store(root, f"20261201T00000{i}Z-aaaaa{i}", A[i], seed=seed)
        _store(root, f"20261201T00001{i}Z-bbbbb{i}", B[i], spec="dspark", seed=seed)
    c = lab.compare("sim@spec=none", "sim@spec=dspark", measures=["decode_c1"], results=root)
    assert not c.paired and "different prompt seeds" not in c.pairing  # was the reason given
    assert c.pairing == (
        "Welch (independent runs): A ran prompt seed 7/1 more than once, so its runs cannot be paired one to "
        "one; B ran prompt seed 7/1 more than once, so its runs cannot be paired one to one"
    )
    assert c.rows[0].test == "Welch t, 3 vs 3 runs"


def test_compare_says_what_each_interval_is_over(stored, capsys):
    assert main(["compare", "sim@spec=none", "sim@spec=dspark", "--results", str(stored)]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.startswith("| measure"))
    assert [h.strip() for h in header.strip("|").split("|")][4:6] == ["CI of B − A", "over"]
    decode = next(line for line in out.splitlines() if line.startswith("| decode_c1"))
    assert "| 95 % [" in decode and "| boots " in decode  # every stored run booted its lane


def test_compare_on_the_stored_sim_lanes_prints_the_correction_it_applied(capsys, lab_record):
    results = lab_record
    assert main(["compare", "sim/spec-none", "sim/spec-dspark", "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "Family-wise correction: Holm over the 5 tested measures" in out
    assert "| p (Holm) " in out and "Holm-adjusted over 5 measures" in out
    # both lanes: five runs on one boot and a run on a boot of its own
    assert "6 runs (runs on 2 boots)" in out and "| runs on 2 boots |" in out
    c = rp.compare_sides(*(rp.select(_load(results), s) for s in ("sim/spec-none", "sim/spec-dspark")))
    assert "family-wise correction: Holm over the 5" in rp.ShownComparison(c)._repr_html_()


def _load(root):
    from labkit.store import load_results

    return load_results(root)


def test_a_lanes_recorded_figures_and_measured_runs_are_never_mixed(lab_record, capsys):
    """The prod lane's note figures were recorded under spec-dspark, before the recipe gained its staging
    axis; two measured runs now sit under spec-dspark_staging-local-view. The lane is its measured runs (the
    recorded set left out, said so) unless --recorded asks for the note's figures."""
    from labkit.measure import RunSummary
    from labkit.recipe import find_recipe, load_recipe
    from labkit.store import load_results

    plan = load_recipe(find_recipe("prod")).resolve({"spec": "dspark"})
    for v in (44.0, 45.0):
        with ResultsStore(lab_record).new_run(plan) as run:
            run.finish(RunSummary(measures={"decode_c1": v}, n_ok=4), boot={}, provenance={"harness": "test"})
    data = load_results(lab_record)
    side = rp.select(data, "prod")
    assert {d.source for d in side.docs} == {"measured"} and len(side.docs) == 2
    assert side.left_out == "1 recorded figure set left out (--recorded uses them)"
    note = rp.select(data, "prod", recorded=True)
    assert [d.source for d in note.docs] == ["recorded"] and note.unit == "recorded figures"
    assert note.left_out == "2 measured runs left out (--recorded)"
    main(["compare", "prod", "prod", "--recorded", "--results", str(lab_record)])
    out = capsys.readouterr().out
    assert "1 run (recorded figures); 2 measured runs left out (--recorded)" in out
