"""`labkit compare` by prompt content (docs/compare.md, "By prompt content"): stored runs of two lanes, paired on
shared prompt seeds, compared category by category, each decode difference read against the lanes'
acceptance: explained, partly explained, not explained, or no difference to explain."""

from __future__ import annotations

import json

import pytest

from labkit import report as rp
from labkit.cli.app import main
from labkit.report.content_compare import (
    EXPLAINED,
    NO_SPEED_DIFFERENCE,
    NOT_EXPLAINED,
    PARTLY,
    readings,
)
from labkit.store import ResultsStore, load_results
from tests.support.results import sim_plan, stored_run

JITTER = (1.0, 1.02, 0.98, 1.01, 0.99)  # run to run, the same on both sides' prompts (paired)
# (decode c1, τ) per category, lane A and lane B; steps per second = decode / τ
A = {"code": (30.0, 2.0), "prose": (20.0, 1.5), "structured": (25.0, 2.0), "chat": (22.0, 1.8)}
B = {
    "code": (60.0, 4.0),  # ×2 decode, ×2 τ: steps per second the same, acceptance explains it
    "prose": (30.0, 1.5),  # ×1.5 decode, the same τ: the per-step speed, not acceptance
    "structured": (50.0, 2.8),  # ×2 decode, ×1.4 τ: half of it (log scale), the rest per-step speed
    "chat": (22.0, 1.8),  # the same: nothing to explain
}


def _store(root, lane, spec, i):
    m = {"decode_c1": 30.0 * JITTER[i]}
    for category, (decode, tau) in lane.items():
        # τ varies a little less than decode from run to run, so steps per second are not constant
        m[f"decode_c1@{category}"] = decode * JITTER[i]
        m[f"accept_length@{category}"] = tau * (1 + (JITTER[i] - 1) / 2)
    prov = {"cold_expected": True, "engine_version": "0.33.0+labkit.sim", "prompt_seed": f"5/{i}"}
    with ResultsStore(root).new_run(sim_plan(spec), run_id=f"20261202T00000{i}Z-{spec[:4]}{i}") as run:
        run.finish({"measures": m, "n_ok": 4}, provenance=prov)


@pytest.fixture()
def stored(tmp_path):
    root = tmp_path / "results"
    for i in range(5):
        _store(root, A, "none", i)
        _store(root, B, "dspark", i)
    return root


def test_each_category_is_read_against_its_acceptance(stored):
    data = load_results(stored)
    c = rp.compare_sides(rp.select(data, "sim/spec-none"), rp.select(data, "sim/spec-dspark"))
    assert c.paired
    tested = {r.measure for r in c.rows}
    assert {f"decode_c1@{x}" for x in A} | {f"accept_length@{x}" for x in A} <= tested  # paired by category
    got = {r.category: r for r in c.content}
    assert [r.category for r in c.content] == ["prose", "code", "structured", "chat"]  # catalogue order
    assert got["code"].reading == EXPLAINED and got["code"].share == pytest.approx(1.0, abs=0.01)
    assert got["prose"].reading == NOT_EXPLAINED and "τ does not move with decode" in got["prose"].why
    assert got["structured"].reading == PARTLY and got["structured"].share == pytest.approx(0.485, abs=0.01)
    assert "the per-step speed the rest" in got["structured"].why
    assert got["chat"].reading == NO_SPEED_DIFFERENCE
    text = rp.compare_text(c)
    assert "By prompt content, does acceptance explain the decode difference?" in text
    assert "  code: explained by acceptance — decode ×2 (faster), τ ×2; steps per second ×1" in text
    assert json.loads(json.dumps(c.to_dict()))["by_content"][1]["reading"] == EXPLAINED


def test_the_explanation_needs_both_sides_tau_and_enough_runs(stored):
    data = load_results(stored)
    a, b = rp.select(data, "sim/spec-none"), rp.select(data, "sim/spec-dspark")
    c = rp.compare_sides(a, b, measures=["decode_c1@code"])
    assert [r.reading for r in c.content] == [EXPLAINED]  # τ read from the runs, not from the compared rows
    two = rp.compare_sides(a, b, measures=["decode_c1@code"])
    few = readings(two.rows, a.docs[:2], b.docs[:2], paired=False, margin=0.02)
    assert few[0].reading == "too few runs"
    assert rp.compare_sides(a, b, measures=["decode_c1"]).content == []  # no category compared: no reading
    no_tau = [
        stored_run({"run_id": f"n{i}", "summary": {"measures": {"decode_c1@code": 30.0}}}) for i in range(5)
    ]
    assert (
        readings(c.rows, no_tau, b.docs, paired=False, margin=0.02)[0].reading
        == "no acceptance on both sides"
    )


def test_the_cli_prints_the_readings(stored, capsys):
    assert main(["compare", "sim/spec-none", "sim/spec-dspark", "--results", str(stored)]) == 0
    out = capsys.readouterr().out
    assert "By prompt content" in out and "prose: not explained by acceptance" in out
