"""The load workload against the simulator, whose ground truth says when each request arrived, got its first token
and ended (docs/measurement.md, "Serving under load"): closed-loop levels keep N requests in flight and their
percentiles are the truth's; an open loop sends on its schedule; a blocked event loop is flagged client-bound; a
silent stream is cut and counted as a cut, an HTTP 500 as an http_5xx; an engine that dies mid-level ends the run
there, that level marked failed, the earlier one whole and no later one run."""

from __future__ import annotations

import time

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.measure.request.client import EndpointError
from labkit.measure.summary.latency import percentile
from labkit.measure.summary.load import load_window
from labkit.measure.workloads import load as load_workload
from labkit.recipe import DecodePlan, LoadPlan, MeasurePlan, PrefillPlan
from labkit.sim.oracle import SimOracle

FAST = {"decode_tps": 200, "prefill_tps": 20000, "batch_beta": 0.1}


def _plan(load: LoadPlan, seed: int | None = 7) -> MeasurePlan:
    return MeasurePlan(
        "chat", 1, DecodePlan((1,), 0, 16, 0), PrefillPlan((), 1), 30.0, seed=seed, workloads={"load": load}
    )


def _load(**kw) -> LoadPlan:
    base = {"level_requests": 12, "prompt_tokens": 64, "output_tokens": 16, "warmup": 1}
    return LoadPlan(**{**base, **kw})


def _by_id(truth: dict) -> dict[str, dict]:
    return {t["id"]: t for t in truth["requests"]}


def _in_flight_peak(spans: list[tuple[float, float]]) -> int:
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


@pytest.mark.alone
def test_closed_levels_keep_n_in_flight_and_their_ttft_percentiles_are_the_truths():
    with SimOracle(sets=FAST) as sim:
        res = run_bench(sim.url, _plan(_load(concurrency=(1, 4))), BenchOptions(progress=False))
        truth = _by_id(sim.truth())
    load = [r for r in res.records if r.phase == "load"]
    assert [sum(r.load_level == n for r in load) for n in (1.0, 4.0)] == [12, 12]
    assert sum(r.phase == "warmup" for r in res.records) == 2 and all(r.ok for r in load)
    for level in (1, 4):
        recs = [r for r in load if r.load_level == level]
        seen = [truth[r.response_id] for r in recs]
        # the engine saw exactly `level` of them at once, as the client says
        assert _in_flight_peak([(t["t_arrival"], t["t_last"]) for t in seen]) == level
        assert res.summary.measures[f"load_peak_concurrency@load={level}"] == level
        true_ttft = [t["t_first"] - t["t_arrival"] for t in seen]
        for q in (50, 90):
            measured = res.summary.measures[f"load_ttft@load={level}@stat=p{q}"]
            # the client's TTFT adds the network and its own stamps to the engine's: well under 5 ms here
            assert 0 <= measured - percentile(true_ttft, q) < 0.005, (level, q)
        assert res.summary.load[f"load@load={level}"]["answered"] == 12
    assert res.summary.flags == []


@pytest.mark.alone
def test_an_open_loop_sends_on_its_schedule_and_is_not_client_bound():
    with SimOracle(sets=FAST) as sim:
        plan = _plan(_load(rate=(20.0,), arrival="constant", level_requests=20))
        res = run_bench(sim.url, plan, BenchOptions(progress=False))
        truth = _by_id(sim.truth())
    recs = [r for r in res.records if r.phase == "load"]
    intended = [r.t_intended for r in recs]
    assert all(b - a == 50_000_000 for a, b in zip(intended, intended[1:], strict=False))  # constant 1/20 s
    arrivals = sorted(truth[r.response_id]["t_arrival"] for r in recs)
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert abs(percentile(gaps, 50) - 0.050) < 0.002  # the engine saw the schedule's gaps
    entry = res.summary.load["load@rate=20"]
    assert entry["client_bound"] is False and entry["lateness_threshold_s"] == pytest.approx(0.0025)
    assert all(r.lateness_s is not None and r.lateness_s >= 0 for r in recs)
    assert not [f for f in res.summary.flags if f["code"] == "client-bound"]


def test_a_blocked_event_loop_is_flagged_client_bound(monkeypatch):
    """A planted stall: building the 4th request blocks the event loop for 150 ms, so the sends due meanwhile go
    late, and the level says so."""
    built = []
    real = load_workload._request

    def blocking(s, p, text, output_tokens=None):
        built.append(text)
        if len(built) == 5:  # the warm-up is the first
            time.sleep(0.150)
        return real(s, p, text, output_tokens)

    monkeypatch.setattr(load_workload, "_request", blocking)
    with SimOracle(sets=FAST) as sim:
        plan = _plan(_load(rate=(50.0,), arrival="constant", level_requests=25))
        res = run_bench(sim.url, plan, BenchOptions(progress=False))
    entry = res.summary.load["load@rate=50"]
    assert entry["client_bound"] is True
    (flag,) = [f for f in res.summary.flags if f["code"] == "client-bound"]
    assert flag["window"] == "load@rate=50" and "sends came late" in flag["message"]
    late = [r.lateness_s for r in res.records if r.phase == "load"]
    assert max(late) > 0.1  # the sends due during the block went when it ended


NO_FAILURES = {"http_5xx": 0, "reset": 0, "cut": 0, "timeout": 0, "other": 0}


def test_a_silent_stream_is_cut_after_the_stall_bound_and_counted_as_a_cut():
    sets = {**FAST, "fault_stall_request": 4, "fault_stall_after_tokens": 4}
    with SimOracle(sets=sets) as sim:
        plan = _plan(_load(concurrency=(2,), level_requests=8, stall_s=0.5, max_error_share=0.2))
        res = run_bench(sim.url, plan, BenchOptions(progress=False))
    recs = [r for r in res.records if r.phase == "load"]
    (cut,) = [r for r in recs if not r.ok]
    assert cut.error.startswith("cut: no chunk for") and "stall bound 0.5 s" in cut.error
    m = res.summary.measures
    assert m["load_errors@load=2"] == pytest.approx(1 / 8)
    assert "load_ttft@load=2@stat=p50" in m  # 1 of 8 is within the 20 % the plan tolerates
    entry = res.summary.load["load@load=2"]
    # cut by the stall bound, not ended by the 30 s request timeout; the engine still answers, so not failed
    assert entry["failures"] == {**NO_FAILURES, "cut": 1} and "level_failed" not in entry


@pytest.mark.parametrize("share,valid", [(0.2, True), (0.01, False)])
def test_an_http_500_inside_a_level_is_counted_as_such_and_the_run_goes_on(share, valid):
    # generation requests: 1 warm-up, then the 3rd of the c1 level is answered HTTP 500; then c2
    sets = {**FAST, "fault_http500_request": 4}
    with SimOracle(sets=sets) as sim:
        plan = _plan(_load(concurrency=(1, 2), level_requests=8, max_error_share=share))
        res = run_bench(sim.url, plan, BenchOptions(progress=False))
    (failed,) = [r for r in res.records if not r.ok]
    assert failed.http_status == 500 and failed.load_level == 1.0
    one, two = res.summary.load["load@load=1"], res.summary.load["load@load=2"]
    assert one["failures"] == {**NO_FAILURES, "http_5xx": 1} and "level_failed" not in one
    assert two["failures"] == NO_FAILURES and two["answered"] == 8  # the engine lives: the next level ran
    # 1 of 8 (12.5 %) is within a 20 % share and over a 1 % one
    assert bool(one.get("invalid")) is not valid
    assert ("load_ttft@load=1@stat=p50" in res.summary.measures) is valid
    assert "load_ttft@load=2@stat=p50" in res.summary.measures


@pytest.mark.parametrize(
    "loop", [{"concurrency": (1, 2, 4)}, {"rate": (20.0, 40.0, 80.0), "arrival": "constant"}]
)
def test_an_engine_that_dies_mid_level_ends_the_run_with_that_level_failed_and_the_earlier_one_kept(loop):
    # generation requests: 1 warm-up + 6 at level one, 1 warm-up, then the 3rd of level two kills the engine
    sets = {**FAST, "fault_exit_request": 11, "fault_exit_after_tokens": 4}
    kept = []
    with SimOracle(sets=sets) as sim:
        plan = _plan(_load(level_requests=6, **loop))
        with pytest.raises(EndpointError, match="the engine died during load level"):
            run_bench(sim.url, plan, BenchOptions(progress=False, on_partial=kept.append))
        exit_status = sim.proc.proc.poll() if sim.proc is not None else None
    assert exit_status == 3  # the simulator exited by itself: nothing of it is left running
    (res,) = kept  # the runner kept what was measured, as on any unreachable endpoint
    assert res.provenance["partial"] is True and "engine died during load level" in res.provenance["error"]
    closed = "concurrency" in loop
    first, second, third = [
        load_window("closed" if closed else "open", v) for v in loop.get("concurrency", loop.get("rate"))
    ]
    where = {w: w.removeprefix("load@") for w in (first, second, third)}  # load=1, rate=20.0 ...
    levels = [r.load_level for r in res.records if r.phase == "load"]
    assert levels.count(levels[0]) == 6 and len(set(levels)) == 2  # the third level never ran
    assert sum(r.phase == "warmup" for r in res.records) == 2  # nor its warm-up
    m, load = res.summary.measures, res.summary.load
    assert f"load_ttft@{where[first]}@stat=p50" in m and m[f"load_errors@{where[first]}"] == 0.0
    assert not [k for k in m if f"@{where[second]}" in k or f"@{where[third]}" in k]
    assert "level_failed" not in load[first] and load[first]["answered"] == 6
    assert load[second]["level_failed"] and load[second]["invalid"] is True
    assert load[second]["failures"]["reset"] >= 1  # the streams the exit cut off
    assert third not in load
    assert any(n.startswith(f"{second}: the engine stopped answering") for n in res.summary.notes)
