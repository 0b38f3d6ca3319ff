"""The drain check, the effective concurrency and output sanity (docs/measurement.md, "Drain and effective
concurrency", "Output sanity"): the bookkeeping from Prometheus texts and records, then runs against the real
simulator with another client's long request on it, an engine limited to one stream at a time, a planted
failed request and a planted loop.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.request

import pytest

from labkit.measure import BenchOptions, RequestRecord, RunSummary, run_bench
from labkit.measure.records import GroupRecord
from labkit.measure.server import metrics as mx
from labkit.measure.server.scrapes import EvidenceLog
from labkit.measure.summary.compose import summarize
from labkit.measure.summary.sanity import apply_sanity, exact_loop, kinds, z_function
from labkit.measure.workloads import window_of
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from labkit.report.tables import in_window
from labkit.sim.oracle import SimOracle
from tests.measure.test_evidence import _wait_admitted

PLAN = MeasurePlan("chat", 1, DecodePlan((1,), 1, 8, 0), PrefillPlan((), 1), 10.0)


def _plan(turns=2, n=24, conc=(1,), warmup=1, prompts=(), timeout=20.0):
    return MeasurePlan("chat", 1, DecodePlan(conc, turns, n, warmup), PrefillPlan(prompts, 1), timeout)


def _vllm(success=0.0, running=0.0, waiting=0.0) -> mx.Samples:
    return mx.parse_prometheus(
        f'vllm:request_success_total{{engine="0",finished_reason="length"}} {success}\n'
        f'vllm:num_requests_running{{engine="0"}} {running}\n'
        f'vllm:num_requests_waiting{{engine="0"}} {waiting}\n'
    )


def _codes(flags: list[dict]) -> list[tuple[str, str]]:
    return [(f["code"], f["window"]) for f in flags]


# ---- bookkeeping ----------------------------------------------------------------------------------


def test_a_start_that_drained_during_the_wait_is_not_flagged_and_one_that_did_not_is():
    log = EvidenceLog()
    busy, idle = _vllm(0, 1, 0), _vllm(1, 0, 0)
    log.see("decode", 0, busy)  # the start's wait only records gauges (labkit/measure/server/drain.py)
    log.see("decode", 0, idle)
    log.drained("decode", 0, "start", 0.4, idle)
    log.pair("decode", 0, idle, _vllm(2), 1)
    s = summarize([], [], PLAN, windows=log.windows)
    assert (
        s.flags == []
    )  # the other client's request finished before labkit's first one (counted: 1 sent, 2 done)
    e = s.evidence["decode"]
    assert (e["drain_waits"], e["drain_wait_s"], e["undrained"], e["running_start"]) == (1, 0.4, [], 1)
    log = EvidenceLog()
    log.see("decode", 0, busy)
    log.drained("decode", 0, "start", 2.0, _vllm(0, 1, 0))
    log.pair("decode", 0, _vllm(0, 1, 0), _vllm(1, 0, 2), 1)
    log.drained("decode", 0, "after c1 turn 1", 2.0, _vllm(1, 0, 2))
    flags = summarize([], [], PLAN, windows=log.windows).flags
    assert _codes(flags) == [("busy-at-start", "decode"), ("not-drained", "decode")]
    assert "and still 1 running and 0 waiting after waiting 2.0 s" in flags[0]["message"]
    assert "0 running and 2 waiting after c1 turn 1, still after waiting 2.0 s" in flags[1]["message"]
    log = EvidenceLog()  # drain_timeout = 0: checked, never waited for, and the flags do not claim a wait
    log.see("decode", 0, busy)
    log.drained("decode", 0, "start", 0.0, busy)
    log.pair("decode", 0, busy, _vllm(1, 1, 0), 1)
    log.drained("decode", 0, "after c1 turn 1", 0.0, _vllm(1, 1, 0))
    flags = summarize([], [], PLAN, windows=log.windows).flags
    assert _codes(flags) == [("busy-at-start", "decode"), ("not-drained", "decode")]
    assert all("waiting 0.0 s" not in f["message"] for f in flags)
    assert "after c1 turn 1 (not waited for: drain_timeout 0)" in flags[1]["message"]


def test_effective_concurrency_from_engine_steps_else_client_timing_and_short_groups_are_flagged():
    def stream(first, last, flags=""):
        return RequestRecord(phase="decode", concurrency=2, t_first=first, t_last=last, flags=flags)

    from labkit.measure.request.recording import client_concurrency, set_concurrency

    assert client_concurrency([stream(0, 100), stream(5, 100)]) == pytest.approx(195 / 100)
    assert client_concurrency([stream(0, 100), stream(100, 200)]) == pytest.approx(1.0)  # one after the other
    assert client_concurrency([stream(0, 100), RequestRecord(ok=False)]) == 1.0  # a failed stream ran no time
    assert client_concurrency([stream(0, 100), stream(5, 100, "burst-read (...)")]) is None
    g = GroupRecord(concurrency=2, server_window={"request_steps": 130.0, "engine_steps": 100.0})
    set_concurrency(g, [stream(0, 100), stream(5, 100)])
    assert (g.effective_concurrency, g.concurrency_source) == (1.3, "engine steps")
    assert g.concurrency_client == pytest.approx(1.95)
    ok = GroupRecord(concurrency=2, effective_concurrency=1.95, concurrency_source="client timing")
    short = GroupRecord(concurrency=2, group=1, effective_concurrency=1.3, concurrency_source="engine steps")
    s = summarize([], [ok, short], PLAN)
    assert s.measures["decode_c2_concurrency"] == pytest.approx(1.625)
    (flag,) = s.flags
    assert (flag["code"], flag["window"]) == ("short-concurrency", "decode_c2")
    assert "1 of 2 groups ran at an effective concurrency below 1.5" in flag["message"]
    # the tables mark the window's own figures, not the c1 ones (labkit/report/tables.py)
    assert in_window("decode_c2_agg", "decode_c2") and not in_window("decode_c1", "decode_c2")


def test_loops_are_exact_repetitions_at_the_end_covering_half_the_text():
    assert z_function("aabxaab") == [7, 1, 0, 0, 3, 1, 0]
    assert exact_loop(" the cat" * 20) == (8, 1.0)
    prose = "".join(f" word{i}" for i in range(40))
    assert exact_loop(prose) is None
    assert exact_loop(prose + " and again" * 40) == (10, pytest.approx(400 / (len(prose) + 400)))
    assert exact_loop(prose + " and again" * 4) is None  # a repeated phrase, not half of the text
    assert exact_loop("ab" * 20) is None  # 40 characters: too short to call
    assert exact_loop("\n" * 80) == (1, 1.0)


def _rec(**kw) -> RequestRecord:
    base = dict(
        phase="decode", concurrency=1, requested_tokens=8, output_tokens=8, chunks=8, finish_reason="length"
    )
    return RequestRecord(**{**base, **kw})


def test_failed_and_looping_responses_invalidate_their_window_unless_the_model_loops_by_nature():
    assert kinds(_rec()) == set()
    assert kinds(_rec(ok=False, chunks=0, output_tokens=None)) == {"failed", "empty"}
    assert kinds(_rec(ok=False, output_tokens=3, chunks=3)) == {"failed", "truncated"}
    assert kinds(_rec(loop_period=4, loop_share=0.9)) == {"looping"}
    s = RunSummary(
        measures={"decode_c1": 50.0, "ttft_c1": 0.1, "decode_c1_cold": 20.0, "decode_c2_agg": 80.0}
    )
    records = [_rec(), _rec(ok=False, chunks=0, error="HTTP 500: boom"), _rec(cold=True)]
    records.append(_rec(concurrency=2, loop_period=3, loop_share=1.0))
    apply_sanity(s, window_of=window_of, records=records)
    assert s.measures == {"decode_c1_cold": 20.0}  # the cold turn is a window of its own
    assert s.sanity["decode_c1"]["excluded"] == {"decode_c1": 50.0, "ttft_c1": 0.1}
    assert s.sanity["decode_c1"]["failed"] == s.sanity["decode_c1"]["empty"] == 1
    assert _codes(s.flags) == [("failed-requests", "decode_c1"), ("looping-output", "decode_c2")]
    assert "1 of 2 requests failed (1 empty, 0 truncated): HTTP 500: boom" in s.flags[0]["message"]
    assert any(
        n.startswith("decode_c1 invalid (1 failed, 1 empty of 2): left out: decode_c1, ttft_c1")
        for n in s.notes
    )
    s = RunSummary(measures={"decode_c2_agg": 80.0})
    apply_sanity(
        s,
        window_of=window_of,
        records=[_rec(concurrency=2, loop_period=3, loop_share=1.0)],
        loops_expected=True,
    )
    assert s.measures == {"decode_c2_agg": 80.0} and s.flags == []
    assert s.sanity["decode_c2"]["looping"] == 1 and s.sanity["decode_c2"]["loops_expected"]
    assert any("loops by nature (model.loops), so this is reported, not gating" in n for n in s.notes)
    back = RunSummary.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back.sanity == s.sanity and RunSummary.from_dict({}).sanity == {}


def test_a_failed_content_turn_invalidates_its_category_and_a_warm_c1_failure_none_of_a_categorys():
    """Content turns are a window of their own per category (decode@code), as the evidence has them: a failed
    code turn takes out the code figures only, and a failed warm c1 turn none of a category's (the prefix
    match once took ttft_c1@code out with the warm window and left decode_c1@code in)."""
    measures = {"decode_c1": 50.0, "ttft_c1": 0.1, "decode_c1@code": 40.0, "ttft_c1@code": 0.2}
    measures |= {"accept_length@code": 2.0, "decode_c1@prose": 30.0}
    s = RunSummary(measures=dict(measures))
    apply_sanity(
        s,
        window_of=window_of,
        records=[
            _rec(phase="content", content="code", ok=False, chunks=0),
            _rec(phase="content", content="prose"),
        ],
    )
    assert s.measures == {"decode_c1": 50.0, "ttft_c1": 0.1, "decode_c1@prose": 30.0}
    assert _codes(s.flags) == [("failed-requests", "decode@code")]
    s = RunSummary(measures=dict(measures))
    apply_sanity(
        s, window_of=window_of, records=[_rec(ok=False, chunks=0), _rec(phase="content", content="code")]
    )
    assert set(s.measures) == {"decode_c1@code", "ttft_c1@code", "accept_length@code", "decode_c1@prose"}
    assert in_window("ttft_c1", "decode_c1") and in_window("ttft_c1@code", "decode@code")
    assert not in_window("decode_c1_cold", "decode_c1") and not in_window("ttft_c1@code", "decode_c1")


def test_failed_agentic_and_idle_turns_invalidate_their_own_windows_only():
    measures = {"decode_c1": 50.0, "agentic_ttft_t1": 0.1, "agentic_ttft_t2": 0.2, "idle_60_ttft": 0.3}
    s = RunSummary(measures=dict(measures))
    records = [_rec(phase="agentic", session=0, turn=1), _rec(phase="agentic", session=0, turn=2, ok=False)]
    apply_sanity(s, window_of=window_of, records=records + [_rec(phase="idle", idle_s=60.0), _rec()])
    assert s.measures == {"decode_c1": 50.0, "idle_60_ttft": 0.3}
    assert _codes(s.flags) == [("failed-requests", "agentic")]
    s = RunSummary(measures=dict(measures))
    apply_sanity(s, window_of=window_of, records=[_rec(phase="idle", idle_s=60.0, ok=False, chunks=0)])
    assert "idle_60_ttft" not in s.measures and "agentic_ttft_t1" in s.measures


# ---- runs against the simulator -------------------------------------------------------------------


def _long_request(port: int, tokens: int) -> None:
    """Another client's request, plain urllib; it may be cut when the simulator stops."""
    body = {"model": "sim-test", "messages": [{"role": "user", "content": "from elsewhere"}]}
    body.update(max_tokens=tokens, min_tokens=tokens, ignore_eos=True)
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
    except OSError:
        pass


def test_a_busy_engine_at_the_start_is_waited_for_then_flagged():
    # another client's request of 6000 tokens at 200 t/s (30 s) is on the engine when labkit starts; labkit
    # waits 0.5 s for it to drain at each boundary, so every one of them stays busy whatever the machine's speed
    with SimOracle(sets={"max_model_len": 8192}) as sim:
        other = threading.Thread(target=_long_request, args=(sim.port, 6000), daemon=True)
        other.start()
        _wait_admitted(sim.port, 1)
        res = run_bench(
            sim.url, _plan(turns=1, n=8), BenchOptions(progress=False, prefill=False, drain_timeout=0.5)
        )
    codes = {f["code"]: f for f in res.summary.flags}
    assert codes["busy-at-start"]["window"] == "decode"
    assert "1 running and 0 waiting requests when the window opened" in codes["busy-at-start"]["message"]
    # it waited the drain timeout, or a little longer when the machine is loaded (the last poll ends past it)
    waited = re.search(r"after waiting (\d+\.\d) s", codes["busy-at-start"]["message"])
    assert waited and 0.5 <= float(waited.group(1)) < 2.0, codes["busy-at-start"]["message"]
    assert (
        codes["not-drained"]["window"] == "decode"
        and "after the cold turn" in codes["not-drained"]["message"]
    )
    e = res.summary.evidence["decode"]
    assert e["drain_waits"] == 4 and e["drain_wait_s"] >= 2.0  # each wait ran its whole bound
    assert [u["where"] for u in e["undrained"]] == [
        "start",
        "after the cold turn",
        "after warmup 1",
        "after c1 turn 1",
    ]
    assert any(k.endswith(".drain") for k in res.scrapes)  # the last scrape of each wait is kept


def test_an_engine_that_runs_one_stream_at_a_time_is_marked_short_at_c2():
    with SimOracle(sets={"max_num_seqs": 1, "enable_per_request_metrics": True}) as sim:
        res = run_bench(sim.url, _plan(turns=2, n=24, conc=(2,)), BenchOptions(progress=False, prefill=False))
        truth = {t["id"]: t for t in sim.truth()["requests"]}
    assert [g.concurrency_source for g in res.groups] == ["client timing"] * 2  # the sim has no engine steps
    assert all(g.effective_concurrency < 1.1 for g in res.groups)
    (flag,) = [f for f in res.summary.flags if f["code"] == "short-concurrency"]
    assert flag["window"] == "decode_c2" and "2 of 2 groups" in flag["message"]
    assert res.summary.measures["decode_c2_concurrency"] < 1.1
    # the second stream of each group waited for the first: its queue time is in the engine's own figures
    for g in res.groups:
        second = max((r for r in res.records if r.group == g.group), key=lambda r: r.t_first or 0)
        t = truth[second.response_id]
        assert second.engine_metrics["queue_time_ms"] > 0.5 * (t["t_prefill_start"] - t["t_arrival"]) * 1000


def test_a_planted_failed_request_invalidates_its_window_and_only_that_one():
    # generation requests: cold 1, warmup 2, c1 turns 3-4, c2 groups 5-6 and 7-8; request 4 gets HTTP 500
    with SimOracle(sets={"fault_http500_request": 4, "cold_requests": 1}) as sim:
        res = run_bench(
            sim.url, _plan(turns=2, n=16, conc=(1, 2)), BenchOptions(progress=False, prefill=False)
        )
    s = res.summary
    assert s.sanity["decode_c1"]["failed"] == 1 and s.sanity["decode_c1"]["invalid"]
    assert "decode_c1" not in s.measures and "decode_c1" in s.sanity["decode_c1"]["excluded"]
    assert s.method["decode_c1"].startswith("invalid: decode_c1 had failed or looping responses")
    assert "decode_c2_agg" in s.measures and "decode_c1_cold" in s.measures  # other windows keep theirs
    (flag,) = [f for f in s.flags if f["code"] == "failed-requests"]
    assert flag["window"] == "decode_c1" and "HTTP 500" in flag["message"]


@pytest.mark.parametrize("loops_expected", [False, True])
def test_a_planted_loop_gates_unless_the_model_loops_by_nature(loops_expected):
    # request 3, the first warm c1 turn, repeats one word for its 100 tokens; the others are the sim's own
    # text, drawn per request, which never repeats itself
    with SimOracle(sets={"fault_loop_request": 3, "decode_tps": 400}) as sim:
        options = BenchOptions(progress=False, prefill=False, loops_expected=loops_expected)
        res = run_bench(sim.url, _plan(turns=2, n=100), options)
    looped = [r for r in res.records if r.loop_period is not None]
    assert len(looped) == 1 and looped[0].turn == 1 and looped[0].ok and looped[0].loop_share == 1.0
    assert res.summary.sanity["decode_c1"]["looping"] == 1
    if loops_expected:
        assert res.summary.flags == [] and "decode_c1" in res.summary.measures
        assert any("reported, not gating" in n for n in res.summary.notes)
    else:
        assert [f["code"] for f in res.summary.flags] == ["looping-output"]
        assert "decode_c1" not in res.summary.measures
