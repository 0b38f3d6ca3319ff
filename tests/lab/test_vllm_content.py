"""Prompt content on a real engine (docs/measurement.md, "Prompt content"): the tiny-vllm lane with ngram
speculation (K = 4) measures c1 turns on each corpus category, every category's acceptance from vLLM's own
spec-decode counters in windows of its own.

The model has random weights, so which category accepts more is not asserted: what is asserted is what holds
whatever the text, that every category asked gets its turns, its windows and its acceptance, and that the
acceptance is the server's counter deltas over that category's windows (worked out here from the stored raw
scrapes with this file's own parser). What the run showed is printed (`pytest -s`) and written down in
docs/measurement.md.

The engine is the session's shared lane (ngram, K = 4, with each response's cached_tokens;
tests/support/vllm_fixtures.py): its prefix cache is emptied before the run, and everything asserted is a
delta over this run's own windows, so nothing that ran on the engine before matters.
"""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.measure.prompt.corpus import load_corpus
from labkit.measures import CONTENT
from labkit.recipe import DecodePlan, DepthPlan
from labkit.recipe.sessionplan import AgenticPlan
from tests.support.vllm import vllm_available
from tests.support.vllm_lanes import short_plan

pytestmark = pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")
TURNS, N = 4, 96
SESSION = AgenticPlan(turns=4, tool_tokens=256, answer_tokens=16)  # one agentic session (docs/measurement.md)
BLOCK = 128  # vLLM CPU's prefix-cache block
DEPTH = DepthPlan((0, 1024, 4096), prompt_tokens=64, output_tokens=16)  # context depths (docs/measurement.md)


def totals(text: str) -> dict[str, float]:
    """Every sample of a /metrics text summed over its labels, by metric name (this test's own parser)."""
    out: dict[str, float] = {}
    for m in re.finditer(r"^([a-z_:]+)(?:\{[^}]*\})? ([0-9.e+-]+)$", text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


@pytest.fixture(scope="module")
def measured(vllm_shared):
    """One run on the shared lane: a short decode phase, every content category, one agentic session (each
    response's cached_tokens asked for beside the prefix-cache counters), three context depths."""
    argv = next(launch.argv for launch in vllm_shared.lane.launches())
    assert "--speculative-config" in argv and "--enable-prompt-tokens-details" in argv  # the premise
    measure = dataclasses.replace(
        short_plan(concurrency=(1,), turns=2, prompt_tokens=()),
        decode=DecodePlan((1,), TURNS, N, 1),
        workloads={"content": CONTENT, "agentic": SESSION, "depth": DEPTH},
    )
    plan, ep = vllm_shared.plan, vllm_shared.endpoint
    vllm_shared.prepare()
    res = run_bench(
        ep.base_url,
        measure,
        BenchOptions(
            model=ep.model,
            progress=False,
            lane=plan.recipe,
            prompt_seed="26",
            spec_k=4,
            loops_expected=plan.model.loops,  # the tiny random model loops: reported, not gating
            cold_expected=False,  # a shared engine: no cold turn
        ),
    )
    return SimpleNamespace(res=res)


def test_every_category_asked_has_its_turns_windows_and_acceptance(measured):
    res = measured.res
    assert all(r.ok for r in res.records), [r.error for r in res.records if not r.ok]
    m, ids = res.summary.measures, {p.id for ps in load_corpus().prompts.values() for p in ps}
    for c in CONTENT:
        turns = [r for r in res.records if r.phase == "content" and r.content == c]
        assert len(turns) == TURNS and {r.output_tokens for r in turns} == {N}
        assert {r.content_id for r in turns} <= ids and len({r.content_id for r in turns}) == TURNS
        for key in ("decode_c1", "ttft_c1", "accept_length", "accept_per_draft", "accept_rate"):
            assert f"{key}@{c}" in m, (key, c)
        assert 1 <= m[f"accept_length@{c}"] <= 5 and 0 <= m[f"accept_per_draft@{c}"] <= 4
        ev = res.summary.evidence[f"decode@{c}"]
        assert ev["sent"] == TURNS and ev["finished"] == TURNS  # nothing else ran in the category's windows
    assert "accept_length" in m and not any(r.content for r in res.records if r.phase != "content")


def test_each_categorys_acceptance_is_the_servers_deltas_over_its_windows(measured):
    res = measured.res
    for c in CONTENT:
        keys = [k for k in res.scrapes if k.startswith(f"decode@{c}.")]
        before = totals(res.scrapes[f"decode@{c}.before.0"])
        after = totals(res.scrapes[f"decode@{c}.0.{TURNS}"])
        assert len(keys) == TURNS + 1
        d = {k: after[k] - before.get(k, 0.0) for k in after}
        steps = d["vllm:time_to_first_token_seconds_count"] + d["vllm:inter_token_latency_seconds_count"]
        m = res.summary.measures
        assert m[f"accept_length@{c}"] == pytest.approx(d["vllm:generation_tokens_total"] / steps)
        drafts = d["vllm:spec_decode_num_drafts_total"]
        assert m[f"accept_per_draft@{c}"] == pytest.approx(
            d["vllm:spec_decode_num_accepted_tokens_total"] / drafts
        )


def test_what_the_run_shows(measured, capsys):
    """The figures, printed, for the docs and the report; asserted only within the bounds K sets."""
    m = measured.res.summary.measures
    rows = [
        ("synthetic (decode phase)", "decode_c1", "accept_length", "accept_per_draft", "accept_drafted_share")
    ]
    rows += [
        (c, *(f"{k}@{c}" for k in ("decode_c1", "accept_length", "accept_per_draft", "accept_drafted_share")))
        for c in CONTENT
    ]
    with capsys.disabled():
        print("\ncontent                   decode c1   tau    a-bar of 4   drafted share")
        for name, dec, tau, ahat, share in rows:
            print(
                f"{name:<25} {m[dec]:9.1f}  {m[tau]:5.2f}  {m[ahat]:10.2f}  {m.get(share, float('nan')):13.2f}"
            )
    # the bounds K = 4 sets (no direction is asserted: the model has random weights): at most K accepted per
    # drafting step, at most K + 1 tokens per engine step, a share of steps drafted in (0, 1]
    for c in CONTENT:
        assert 0 <= m[f"accept_per_draft@{c}"] <= 4 and m[f"accept_length@{c}"] <= 5
        share = m.get(f"accept_drafted_share@{c}")
        assert share is None or 0 < share <= 1


def test_the_sessions_hits_are_vllms_own_and_as_expected(measured, capsys):
    """Agentic sessions on the real engine (docs/measurement.md, "Agentic sessions"): every turn's hit tokens
    are vLLM's prefix-cache counter delta over the turn's window (this file's own parser over the stored
    scrapes) and its response's cached_tokens, in whole 128-token blocks, within the expected range."""
    res = measured.res
    turns = [r for r in res.records if r.phase == "agentic"]
    assert [(r.session, r.turn) for r in turns] == [(0, t) for t in range(1, SESSION.turns + 1)]
    assert all(r.ok for r in turns), [r.error for r in turns]
    key = "agentic.before.0"
    rows = []
    for r in turns:
        after_key = f"agentic.0.{r.turn}"
        before = totals(res.scrapes.get(key + ".drain", res.scrapes[key]))
        after = totals(res.scrapes[after_key])
        hits = after["vllm:prefix_cache_hits_total"] - before.get("vllm:prefix_cache_hits_total", 0.0)
        assert r.hit_window == hits and r.cached_tokens == hits == r.hit_engine  # counters and usage agree
        assert hits % BLOCK == 0
        if r.turn > 1:  # the conversation grew by the answer and a tool result of about 256 server tokens
            grown = r.prompt_tokens - rows[-1][1] - SESSION.answer_tokens
            assert SESSION.tool_tokens * 0.9 <= grown <= SESSION.tool_tokens * 1.1 + 32, grown
            assert r.hit_expected is not None and r.hit_expected_max is not None
            assert r.hit_expected % BLOCK == 0 and r.hit_expected <= hits <= r.hit_expected_max
        rows.append((r.turn, r.prompt_tokens, hits, r.hit_expected, r.hit_expected_max, r.ttft_s))
        key = after_key
    m = res.summary.measures
    assert m["agentic_hit_agreement"] == 1.0 and m[f"agentic_hit_t{SESSION.turns}"] >= BLOCK
    assert "prefix-cache-hit" not in {f["code"] for f in res.summary.flags}  # the sessions hit by design
    with capsys.disabled():
        print("\nturn  prompt  hits (vLLM)  expected  ttft ms")
        for turn, prompt, hits, lo, hi, ttft in rows:
            print(f"{turn:4}  {prompt:6}  {hits:11.0f}  {lo}-{hi}  {ttft * 1000:7.1f}")


def test_the_depths_hits_are_vllms_own_and_as_expected(measured, capsys):
    """Context depth on the real engine (docs/measurement.md, "Context depth"): every measured request's hit
    tokens are vLLM's prefix-cache counter delta over its window (this file's own parser over the stored scrapes)
    and its response's cached_tokens; an uncached context hits nothing, a cached one its load request's prompt
    in whole 128-token blocks. TTFT cached against uncached is printed, not asserted (a speed)."""
    res = measured.res
    depth = [r for r in res.records if r.phase == "depth"]
    assert [(r.depth, r.cache_state) for r in depth] == [(0, "uncached")] + [
        (d, s) for d in (1024, 4096) for s in ("uncached", "load", "cached")
    ]
    assert all(r.ok for r in depth), [r.error for r in depth]
    loads = {r.depth: r for r in depth if r.cache_state == "load"}
    rows, n, key = [], 0, ""
    for r in depth:
        n, key = (n + 1, key) if key.startswith(f"depth_{r.depth}.") else (1, f"depth_{r.depth}.before.0")
        before = totals(res.scrapes.get(key + ".drain", res.scrapes[key]))
        key = f"depth_{r.depth}.0.{n}"
        hits = (
            totals(res.scrapes[key])["vllm:prefix_cache_hits_total"] - before["vllm:prefix_cache_hits_total"]
        )
        if r.cache_state == "load":
            assert r.prompt_tokens == r.depth  # fitted to the token by vLLM's own /tokenize
            continue
        assert r.cached_tokens == r.hit_engine == r.hit_window == hits  # usage and the counters agree
        if r.cache_state == "uncached":
            assert r.hit_engine == 0
        else:
            assert r.hit_engine == r.hit_expected == loads[r.depth].prompt_tokens // BLOCK * BLOCK > 0
        rows.append((r.depth, r.cache_state, r.prompt_tokens, r.hit_engine, r.ttft_s, r.decode_tps))
    m = res.summary.measures
    assert m["depth_hit_agreement"] == 1.0 and m["depth_4096_new_tokens_cached"] < 2 * BLOCK
    with capsys.disabled():
        print("\ndepth  cache     prompt  hits (vLLM)  ttft ms  decode t/s")
        for d, state, prompt, hits, ttft, dec in rows:
            print(f"{d:5}  {state:8}  {prompt:6}  {hits:11.0f}  {ttft * 1000:7.1f}  {dec or 0:10.1f}")
        print(
            f"TTFT uncached / cached: 1024 {m['depth_1024_ttft_gain']:.2f}, 4096 {m['depth_4096_ttft_gain']:.2f}"
        )
