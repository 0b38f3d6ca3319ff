"""Drawn request lengths of the load workload (docs/measurement.md, "Serving under load"): vLLM's range-ratio
ranges, seeded per level and request, and sent as drawn to the simulator, whose truth says what it received."""

from __future__ import annotations

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.measure.prompt.lengths import MIN_OUTPUT, drawn_lengths, length_range
from labkit.recipe import DecodePlan, LoadPlan, MeasurePlan, PrefillPlan
from labkit.sim.oracle import SimOracle


def test_the_ranges_are_vllms_and_a_draw_is_seeded():
    assert length_range(1000, 0.5) == (500, 1500) and length_range(128, 0.0) == (128, 128)
    assert length_range(100, 0.25) == (75, 125)
    with pytest.raises(ValueError):
        length_range(100, 1.0)
    draws = [drawn_lengths(1000, 100, 0.5, f"7/load@load=4/{k}") for k in range(400)]
    assert all(500 <= p <= 1500 and 50 <= o <= 150 for p, o in draws)
    assert min(p for p, _ in draws) < 600 and max(p for p, _ in draws) > 1400  # the whole range, uniformly
    assert draws == [drawn_lengths(1000, 100, 0.5, f"7/load@load=4/{k}") for k in range(400)]
    assert drawn_lengths(1000, 100, 0.0, "x") == (1000, 100)
    assert all(o >= MIN_OUTPUT for _, o in (drawn_lengths(100, 2, 0.9, str(k)) for k in range(50)))


def _plan(load: LoadPlan) -> MeasurePlan:
    return MeasurePlan(
        "chat", 1, DecodePlan((1,), 0, 16, 0), PrefillPlan((), 1), 30.0, seed=5, workloads={"load": load}
    )


def test_a_level_sends_the_drawn_lengths_and_two_runs_send_the_same():
    load = LoadPlan(concurrency=(2,), level_requests=12, prompt_tokens=256, output_tokens=32, range_ratio=0.5)
    with SimOracle(sets={"decode_tps": 400, "prefill_tps": 40000}) as sim:
        runs = [run_bench(sim.url, _plan(load), BenchOptions(progress=False)) for _ in range(2)]
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    asked = []
    for res in runs:
        recs = sorted((r for r in res.records if r.phase == "load"), key=lambda r: r.turn)
        assert len(recs) == 12 and all(r.ok for r in recs)
        outputs = [r.requested_tokens for r in recs]
        # each request forced the answer length drawn for its order in the level, and got it
        assert outputs == [drawn_lengths(256, 32, 0.5, f"5/load@load=2/{r.turn}")[1] for r in recs]
        assert [r.output_tokens for r in recs] == outputs
        assert [truth[r.response_id]["max_tokens"] for r in recs] == outputs
        # the prompts follow their drawn lengths (cut in words, so near them; the server's count is kept)
        for r in recs:
            want = drawn_lengths(256, 32, 0.5, f"5/load@load=2/{r.turn}")[0]
            assert r.prompt_target == want
            assert abs(r.prompt_tokens - want) <= 0.15 * want, (r.prompt_tokens, want)
        assert len({r.prompt_tokens for r in recs}) > 6
        asked.append((outputs, [r.prompt_target for r in recs]))
    assert asked[0] == asked[1]  # the same seed: the same lengths asked for in the same order
