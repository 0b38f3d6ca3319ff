"""The sweep and capacity profiles on the simulator (docs/measurement.md, "The sweep profile", "Capacity under
the SLO"): the capacity of a step-mode engine that runs at most 4 requests at once, under a TTFT bound a 5th
request's queueing breaks, is found to be 4 streams; a sweep runs c1, the widest level, then rates between; an
engine that dies during the second level stops either search there."""

from __future__ import annotations

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.measure.request.client import EndpointError
from labkit.recipe import DecodePlan, LoadPlan, MeasurePlan, PrefillPlan, SloPlan
from labkit.sim.oracle import SimOracle

STEPS = {"decode_tps": 200, "prefill_tps": 20000, "max_num_batched_tokens": 512, "max_num_seqs": 4}


def _plan(load: LoadPlan, slo: SloPlan | None = None) -> MeasurePlan:
    workloads: dict[str, object] = {"load": load}
    if slo is not None:
        workloads["slo"] = slo
    return MeasurePlan("chat", 1, DecodePlan((1,), 0, 16, 0), PrefillPlan((), 1), 30.0, workloads=workloads)


def test_the_capacity_of_an_engine_running_four_at_once_is_four_streams():
    load = LoadPlan(
        concurrency=(1, 2, 4, 8), level_requests=8, prompt_tokens=64, output_tokens=32, profile="capacity"
    )
    with SimOracle(sets=STEPS) as sim:
        res = run_bench(sim.url, _plan(load, SloPlan(ttft_s=0.08)), BenchOptions(progress=False))
    assert res.summary.measures["load_capacity_streams"] == 4
    cap = res.summary.load["capacity"]
    assert (cap["value"], cap["miss"], cap["passes"]) == (4, 5, 3)  # c5's fifth stream waits a whole request
    ran = [
        (r.load_level, r.load_pass)
        for r in res.records
        if r.phase == "load" and r.stream == 0 and r.turn == 0
    ]
    assert ran == [(1, 0), (2, 0), (4, 0), (8, 0), (6, 0), (5, 0), (4, 1), (4, 2)]
    assert "met in 3 of 3 passes; 5 missed" in res.summary.method["load_capacity_streams"]


def test_a_sweep_runs_c1_the_widest_level_then_constant_rates_between():
    load = LoadPlan(
        concurrency=(4,), level_requests=8, prompt_tokens=64, output_tokens=16, profile="sweep", sweep_rates=3
    )
    with SimOracle(sets={"decode_tps": 200, "prefill_tps": 20000, "batch_beta": 0.2}) as sim:
        res = run_bench(sim.url, _plan(load), BenchOptions(progress=False))
    m = res.summary.measures
    levels = list(dict.fromkeys((r.load_loop, r.load_level) for r in res.records if r.phase == "load"))
    assert (
        levels[:2] == [("closed", 1.0), ("closed", 4.0)] and [loop for loop, _ in levels[2:]] == ["open"] * 3
    )
    low, high = m["load_request_rate@load=1"], m["load_request_rate@load=4"]
    rates = [rate for _, rate in levels[2:]]
    assert low < rates[0] < rates[1] < rates[2] < high
    for rate in rates:  # constant arrivals: every intended gap is 1/R
        sent = [r.t_intended for r in res.records if r.phase == "load" and r.load_level == rate]
        gaps = {round((b - a) / 1e9, 6) for a, b in zip(sent, sent[1:], strict=False)}
        assert gaps == {round(1 / rate, 6)}


@pytest.mark.parametrize(
    "profile,slo", [("sweep", None), ("capacity", SloPlan(ttft_s=1.0))], ids=["sweep", "capacity"]
)
def test_an_engine_that_dies_in_the_second_level_stops_the_search_there(profile, slo):
    # generation requests: 1 warm-up + 8 at c1, 1 warm-up, then the 2nd of the second level kills the engine
    load = LoadPlan(
        concurrency=(1, 2, 4), level_requests=8, prompt_tokens=64, output_tokens=16, profile=profile
    )
    sets = {"decode_tps": 200, "prefill_tps": 20000, "fault_exit_request": 12, "fault_exit_after_tokens": 4}
    kept = []
    with SimOracle(sets=sets) as sim, pytest.raises(EndpointError, match="engine died during load level"):
        run_bench(sim.url, _plan(load, slo), BenchOptions(progress=False, on_partial=kept.append))
    (res,) = kept
    levels = list(dict.fromkeys(r.load_level for r in res.records if r.phase == "load"))
    second = 4.0 if profile == "sweep" else 2.0  # a sweep's second level is its widest, a ladder's the next
    assert levels == [1.0, second]  # nothing searched after it: no rates, no further rung
    assert res.summary.load[f"load@load={second:g}"]["level_failed"]
    assert "capacity" not in res.summary.load and "load_capacity_streams" not in res.summary.measures
