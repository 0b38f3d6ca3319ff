"""Acceptance by prompt content in the simulator (docs/measurement.md, "Prompt content"): the sim reads the
category from labkit's prompt header and draws from that category's rates; run_bench recovers each category's
truth through /metrics, and the default decode window stays what it is without content."""

from __future__ import annotations

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.measure.prompt.corpus import content_prompt, load_corpus
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from labkit.sim.config import SimConfigError, build_config
from labkit.sim.oracle import SimOracle
from labkit.sim.speculation import content_of_text, request_content

pytestmark = pytest.mark.alone  # timing truths within a few percent (tests/support/workers.py)

PORTS = (18900, 18919)  # this file's sim ports, clear of the other tests' ranges
DECODE_TPS = 100.0
# code: every draft accepted (4 tokens a step), prose: none (1 a step), structured: drawn; default: 1.5 a step
SETS = {
    "spec_method": "mtp",
    "spec_k": 3,
    "spec_accept": [0.5, 0.5, 0.5],
    "spec_accept_code": [1.0, 1.0, 1.0],
    "spec_accept_prose": [0.0, 0.0, 0.0],
    "spec_accept_structured": [0.9, 0.6, 0.3],
    "decode_tps": DECODE_TPS,
    "cold_requests": 0,
}
N = 41  # 1 + 40: whole steps of 4 tokens for code, so its rate has no cut last step


def _plan(content=("prose", "code", "structured"), runs=1):
    return MeasurePlan(
        "chat", runs, DecodePlan((1,), 3, N, 1), PrefillPlan((), 1), 30.0, workloads={"content": content}
    )


def test_each_category_recovers_its_truth_through_run_bench():
    with SimOracle(sets=SETS, ports=PORTS) as sim:
        res = run_bench(sim.url, _plan(), BenchOptions(progress=False, prompt_seed="3"))
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    m = res.summary.measures
    by = {}
    for r in res.records:
        assert r.ok, r.error
        t = truth[r.response_id]
        assert t["content"] == r.content  # the sim read the header labkit wrote
        by.setdefault(r.content if r.phase == "content" else "", []).append(t)
    step = (1 + 1.5) / DECODE_TPS  # the step time is the default rates' whatever the content
    assert m["decode_c1@code"] == pytest.approx(4 / step, rel=0.03)  # 160 t/s
    assert m["decode_c1@prose"] == pytest.approx(1 / step, rel=0.03)  # 40 t/s
    assert m["accept_per_draft@code"] == 3 and m["accept_rate@code"] == 1
    assert m["accept_length@code"] == pytest.approx(
        N / 11
    )  # τ counts the prefill step too: 41 tokens, 11 steps
    assert m["accept_per_draft@prose"] == 0 and m["accept_length@prose"] == 1
    for category in ("prose", "code", "structured"):  # exactly the engine's counts over that category's turns
        ts = by[category]
        assert len(ts) == 3 and len({t["id"] for t in ts}) == 3
        got = sum(t["accepted"] for t in ts) / sum(t["drafts"] for t in ts)
        assert m[f"accept_per_draft@{category}"] == pytest.approx(got, abs=1e-9)
        tau = sum(t["completion_tokens"] for t in ts) / sum(t["steps"] + 1 for t in ts)
        assert m[f"accept_length@{category}"] == pytest.approx(tau, abs=1e-9)
        assert m[f"decode_c1@{category}"] == pytest.approx(
            sorted(t["true_decode_tps"] for t in ts)[1], rel=0.03
        )
    assert 1.0 < m["accept_per_draft@structured"] < 3.0  # drawn: Σ rates = 1.8 in expectation
    # the decode window (cold, warmup and c1 turns on synthetic prose) has the default rates and none of the above
    dec = by[""]
    assert m["accept_per_draft"] == pytest.approx(
        sum(t["accepted"] for t in dec) / sum(t["drafts"] for t in dec)
    )
    assert {t["content"] for t in dec} == {""}
    warm = [truth[r.response_id] for r in res.records if r.phase == "decode" and not r.cold]
    assert m["decode_c1"] == pytest.approx(sorted(t["true_decode_tps"] for t in warm)[1], rel=0.03)
    assert set(res.summary.evidence) == {"decode", "decode@prose", "decode@code", "decode@structured"}
    assert res.provenance["prompt_corpus"]["digest"] == load_corpus().digest


def test_the_same_seed_draws_the_same_prompts_and_no_content_adds_nothing():
    with SimOracle(sets=SETS, ports=PORTS) as sim:
        a = run_bench(sim.url, _plan(("code",)), BenchOptions(progress=False, prompt_seed="9"))
        b = run_bench(sim.url, _plan(("code",)), BenchOptions(progress=False, prompt_seed="9"))
        plain = run_bench(sim.url, _plan(()), BenchOptions(progress=False, prompt_seed="9"))
    ids = [[r.content_id for r in x.records if r.phase == "content"] for x in (a, b)]
    assert ids[0] == ids[1] and len(set(ids[0])) == 3
    assert not any("@" in k for k in plain.summary.measures) and "prompt_corpus" not in plain.provenance
    assert {r.phase for r in plain.records} == {"warmup", "decode"} and set(plain.summary.evidence) == {
        "decode"
    }


def test_the_header_and_the_settings():
    text = content_prompt("00ff00ff00ff", load_corpus().prompts["chat"][3])
    assert content_of_text(text) == "chat" and content_of_text("[00ff00ff00ff] story") == ""
    body = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]}
    assert request_content("chat", body) == "chat"
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": text}]}]}
    assert (
        request_content("chat", parts) == "chat"
        and request_content("completions", {"prompt": text}) == "chat"
    )
    for category, prompts in load_corpus().prompts.items():  # the sim tells every corpus prompt's category
        assert {content_of_text(content_prompt("0a1b2c3d4e5f", p)) for p in prompts} == {category}
    with pytest.raises(SimConfigError, match=r"spec_accept_code: needs 3 rates"):
        build_config(
            "test", sets=["spec_method=mtp", "spec_k=3", "spec_accept=0.5,0.4,0.3", "spec_accept_code=1,1"]
        )
    with pytest.raises(SimConfigError, match=r"spec_accept_prose: only used with spec_method"):
        build_config("test", sets=["spec_accept_prose=0.5"])
    dspark = build_config("dsv41-stock-dspark")
    assert sum(dspark.spec_accept_prose) + 1 == pytest.approx(1.9) and sum(dspark.spec_accept_code) > 4.9
