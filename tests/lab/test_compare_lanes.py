"""labkit compare on simulated lanes with known truths: lanes 3 % apart under 1 % per-request noise are told
apart at n = 5, the same lane measured on two boots is not, and the verdict comes from stored runs only."""

from __future__ import annotations

import pytest

from labkit import lab
from labkit.report import compare as cmp
from tests.support.lanes import NO_TELEMETRY, sim_recipe

pytestmark = pytest.mark.alone  # timing truths within a few percent (tests/support/workers.py)

PORTS = {"slow": 18783, "fast": 18784}
# four 32-token c1 turns per run: 1 % per-request noise (sim decode_noise) plus the timing jitter; no node
# telemetry (NO_TELEMETRY): what is compared is the client's decode
PLAN = (
    f"runs = 5\n{NO_TELEMETRY}\ndecode = {{ concurrency = [1], turns = 4, output_tokens = 32, warmup = 0 }}"
)


@pytest.fixture()
def lanes(tmp_path, monkeypatch):
    root = tmp_path / "recipes"
    for name, tps, seed in (("slow", 100.0, 11), ("fast", 103.0, 21)):
        sim_recipe(
            root / name, port=PORTS[name], settings={"decode_tps": tps, "decode_noise": 0.01, "seed": seed}
        )
        _plan(root / name)
    monkeypatch.setenv("LABKIT_RECIPES", str(root))
    return tmp_path / "results"


def _plan(folder):
    """The test lanes' short decode plan replaced by PLAN (sim_recipe writes [measure] first)."""
    toml = folder / "recipe.toml"
    old = "decode = { concurrency = [1], turns = 2, output_tokens = 16, warmup = 0 }"
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, PLAN))


def _verdict(c, measure="decode_c1"):
    return {r.measure: r for r in c.rows}[measure]


def test_three_percent_apart_is_faster_and_the_same_lane_twice_is_not(lanes, monkeypatch, tmp_path):
    slow = lab.measure(lab.plan("slow"), results=lanes, progress=False)
    fast = lab.measure(lab.plan("fast"), results=lanes, progress=False)
    assert len(slow.run_ids) == len(fast.run_ids) == 5

    c = lab.compare("slow", "fast", measures=["decode_c1"], results=lanes)
    r = _verdict(c)
    assert r.test == "Welch t, 5 vs 5 runs" and r.verdict == cmp.FASTER
    assert r.rel_lo < 0.03 < r.rel_hi  # the interval covers the true 3 %
    assert c.a.unit == "runs on one boot" and not c.gate.blocked

    # the slow lane again, on a second boot with other noise draws: no verdict of faster or slower
    sim_recipe(
        tmp_path / "recipes" / "slow",
        port=PORTS["slow"],
        settings={"decode_tps": 100.0, "decode_noise": 0.01, "seed": 12},
    )
    _plan(tmp_path / "recipes" / "slow")
    again = lab.measure(lab.plan("slow"), results=lanes, progress=False)
    same = lab.compare(",".join(slow.run_ids), ",".join(again.run_ids), measures=["decode_c1"], results=lanes)
    r = _verdict(same)
    assert r.verdict == cmp.NO_DIFFERENCE or r.verdict.startswith(cmp.EQUIVALENT), r
    assert r.rel_lo < 0 < r.rel_hi


def test_a_shared_prompt_seed_pairs_the_runs_without_cache_hits(tmp_path, monkeypatch):
    import json

    root = tmp_path / "recipes"
    for name, tps in (("slow", 100.0), ("fast", 103.0)):
        sim_recipe(
            root / name,
            port=PORTS[name],
            settings={"decode_tps": tps},
            measure=f"runs = 3\nseed = 7\n{NO_TELEMETRY}",
        )
    monkeypatch.setenv("LABKIT_RECIPES", str(root))
    results = tmp_path / "results"
    done = {n: lab.measure(lab.plan(n), results=results, progress=False) for n in ("slow", "fast")}
    docs = {n: [json.loads((d / "run.json").read_text()) for d in done[n].run_dirs] for n in done}
    assert [d["provenance"]["prompt_seed"] for d in docs["slow"]] == ["7/0", "7/1", "7/2"]
    # same texts place by place, yet every prompt starts with its own nonce: the prefix cache never hits
    for n in done:
        assert all(not d["summary"]["flags"] for d in docs[n]), docs[n][0]["summary"]["flags"]
        assert all(d["summary"]["measures"]["prefix_cache_hit_ratio"] == 0 for d in docs[n])
    c = lab.compare("slow", "fast", measures=["decode_c1"], results=results)
    assert c.pairing == "paired on 3 shared prompt seeds" and _verdict(c).test == "paired t on 3 pairs"
    assert {i.fact for i in c.gate.items} >= {"recipe content"}
    assert "prompt set" not in {i.fact for i in c.gate.items}  # both sides ran seed 7
