"""Per-run evidence (docs/measurement.md, "Per-run evidence"): the window bookkeeping from Prometheus texts, and
runs against the real simulator with another client on it, a restart inside a window, and repeated prompts.

Simulators start on a free port of their own choosing (`--port 0`), never on the fixed ports other tests use.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

from labkit.measure import BenchOptions, BenchResult, RunSummary, run_bench
from labkit.measure.server import metrics as mx
from labkit.measure.server.scrapes import EvidenceLog
from labkit.measure.summary.compose import summarize
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from labkit.sim.process import SimProcess

pytestmark = pytest.mark.alone  # another client's load is what it detects (tests/support/workers.py)

# ---- the window bookkeeping, from Prometheus texts --------------------------------------------------


def _vllm(success=0.0, running=None, waiting=None, hits=0.0, queries=0.0, gen=0.0) -> mx.Samples:
    lines = [
        f'vllm:request_success_total{{engine="0",finished_reason="length"}} {success}',
        'vllm:request_success_total{engine="0",finished_reason="stop"} 0.0',
        f'vllm:prefix_cache_hits_total{{engine="0"}} {hits}',
        f'vllm:prefix_cache_queries_total{{engine="0"}} {queries}',
        f'vllm:generation_tokens_total{{engine="0"}} {gen}',
    ]
    if running is not None:
        lines.append(f'vllm:num_requests_running{{engine="0"}} {running}')
    if waiting is not None:
        lines.append(f'vllm:num_requests_waiting{{engine="0"}} {waiting}')
    return mx.parse_prometheus("\n".join(lines) + "\n")


def _sglang(done=0.0, running=0.0, queued=0.0) -> mx.Samples:
    return mx.parse_prometheus(
        f'sglang:e2e_request_latency_seconds_count{{model_name="m"}} {done}\n'
        f'sglang:num_running_reqs{{model_name="m"}} {running}\n'
        f'sglang:num_queue_reqs{{model_name="m"}} {queued}\n'
    )


class Log(EvidenceLog):
    """The phases' log with the summary's pooling and wording of it, as a run's summary gets them."""

    def evidence(self) -> dict:
        return summarize([], [], PLAN, windows=self.windows).evidence

    def flags(self) -> list[dict]:
        return summarize([], [], PLAN, windows=self.windows).flags


PLAN = MeasurePlan("chat", 1, DecodePlan((1,), 1, 8, 0), PrefillPlan((), 1), 10.0)


def _codes(log: Log) -> list[tuple[str, str]]:
    return [(f["code"], f["window"]) for f in log.flags()]


def test_gauges_at_start_and_end_and_absent_gauges_stay_absent():
    log = Log()
    a, b, c = _vllm(0, 0, 0), _vllm(1, 0, 0), _vllm(2, 0, 2)
    log.pair("decode", 0, a, b, 1)
    log.pair("decode", 0, b, c, 1)  # consecutive windows share their scrape
    e = log.evidence()["decode"]
    assert (e["running_start"], e["waiting_start"], e["running_end"], e["waiting_end"]) == (0, 0, 0, 2)
    assert (e["finished"], e["sent"], e["scrapes"], e["busy_scrapes"]) == (2, 2, 3, 1)
    bare = Log()
    bare.pair("decode", 0, _vllm(0), _vllm(1), 1)
    e = bare.evidence()["decode"]
    assert not any(k.startswith(("running", "waiting", "busy")) for k in e)  # never 0 for "not exported"
    assert e["finished"] == 1 and bare.flags() == []
    none = Log()
    none.pair("prefill_300", 0, None, None, 1)  # no /metrics at all: only what labkit itself knows
    assert none.evidence() == {"prefill_300": {"sent": 1, "scrapes": 0}} and none.flags() == []


def test_a_counter_that_went_backwards_invalidates_the_window():
    log = Log()
    assert log.pair("decode", 0, _vllm(0, gen=10), _vllm(5, gen=50), 5) is None
    msg = log.pair("decode", 0, _vllm(5, gen=50), _vllm(2, gen=20), 1)
    assert msg and "vllm:request_success_total went backwards from 5 to 2" in msg and "1 more counter" in msg
    assert log.reset_in("decode", 0) == msg and log.reset_in("prefill_300", 0) is None
    e = log.evidence()["decode"]
    assert e["counter_resets"][0] == {"counter": "vllm:request_success_total", "before": 5.0, "after": 2.0}
    assert "finished" not in e and "prefix_cache_hits" not in e  # not a number over a restart
    (flag,) = log.flags()
    assert flag["code"] == "counter-reset" and flag["window"] == "decode"
    assert "from 5 to 2" in flag["message"] and flag["message"].startswith("decode: ")


def test_more_finished_than_sent_is_foreign_traffic():
    log = Log()
    log.pair("decode", 0, _vllm(10), _vllm(17), 5)
    (flag,) = log.flags()
    assert flag["code"] == "foreign-traffic" and flag["window"] == "decode"
    assert "finished 7 requests while labkit sent 5: 2 came from another client" in flag["message"]
    assert "vllm:request_success_total" in flag["message"]
    fine = Log()
    fine.pair("decode", 0, _vllm(10), _vllm(15), 5)
    assert fine.flags() == []
    sg = Log()
    sg.pair("prefill_4096", 0, _sglang(3), _sglang(5), 1)
    assert _codes(sg) == [("foreign-traffic", "prefill_4096")]
    assert "sglang:e2e_request_latency_seconds_count" in sg.flags()[0]["message"]


def test_busy_at_start_only_from_gauges_set_at_the_scrape():
    log = Log()
    log.pair("decode", 0, _vllm(0, 1, 2), _vllm(1, 0, 0), 1)
    (flag,) = log.flags()
    assert flag["code"] == "busy-at-start" and "1 running and 2 waiting" in flag["message"]
    # SGLang sets its gauges when it logs a batch: an idle SGLang still shows its last one, so no flag
    sg = Log()
    sg.pair("decode", 0, _sglang(0, 1, 0), _sglang(1, 1, 0), 1)
    assert sg.flags() == [] and sg.evidence()["decode"]["running_start"] == 1


def test_prefix_cache_hits_beyond_the_tolerance_flag_the_window():
    log = Log()
    log.pair("decode", 0, _vllm(0, queries=0), _vllm(2, hits=100, queries=300), 2)  # 50 per request: fine
    assert log.flags() == []
    log.pair("decode", 0, _vllm(2, hits=100, queries=300), _vllm(4, hits=400, queries=600), 2)
    (flag,) = log.flags()
    assert flag["code"] == "prefix-cache-hit" and flag["window"] == "decode"
    assert "1 of its 2 request windows" in flag["message"] and "400 of 600 prompt tokens" in flag["message"]
    e = log.evidence()["decode"]
    assert (e["prefix_cache_hits"], e["prefix_cache_queries"]) == (400, 600)


def test_repetitions_pool_their_evidence_and_say_which_one_a_flag_is_about():
    log = Log()
    log.pair("decode", 0, _vllm(0, 0, 0), _vllm(3, 0, 0), 3)
    log.pair("decode", 1, _vllm(3, 0, 0), _vllm(7, 0, 1), 3)
    e = log.evidence()["decode"]
    assert (e["sent"], e["finished"], e["running_start"], e["waiting_end"]) == (6, 7, 0, 1)
    (flag,) = log.flags()
    assert flag["window"] == "decode" and flag["message"].startswith("decode (repetition 2): ")


def test_the_summary_carries_evidence_and_flags_through_json():
    log = Log()
    log.pair("decode", 0, _vllm(0, 0, 0), _vllm(3, 0, 0), 2)
    s = summarize([], [], PLAN, windows=log.windows)
    back = RunSummary.from_dict(json.loads(json.dumps(s.to_dict())))
    assert back.flags == s.flags and back.evidence == s.evidence
    assert back.flags[0]["code"] == "foreign-traffic" and back.evidence["decode"]["finished"] == 3
    assert RunSummary.from_dict({"measures": {}}).flags == []  # runs stored before this stay readable


# ---- runs against the simulator -------------------------------------------------------------------


def _plan(turns=2, n=24, warmup=1, prompts=(), repeats=1):
    return MeasurePlan("chat", 1, DecodePlan((1,), turns, n, warmup), PrefillPlan(prompts, repeats), 20.0)


def _admitted(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/sim/requests", timeout=10) as r:
        return len(json.loads(r.read())["requests"])


def _chat(port: int, tokens: int, text: str) -> None:
    """Another client's request: plain urllib, non-streamed."""
    body = {
        "model": "sim-test",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": tokens,
        "min_tokens": tokens,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200


def _wait_admitted(port: int, n: int) -> None:
    deadline = time.monotonic() + 20
    while _admitted(port) < n:
        assert time.monotonic() < deadline, f"fewer than {n} requests reached the simulator"
        time.sleep(0.005)


def test_another_client_during_the_decode_window_is_flagged(tmp_path):
    with SimProcess(["--preset", "test"]) as sim:
        port = sim.port
        # someone else's long request is on the engine when labkit starts and ends inside labkit's decode
        # window (1000 tokens at <= 200 t/s: about 5 s, so labkit may take up to ~5 s to reach its window on a
        # loaded machine; the window is 40 turns of 40 tokens, ~8 s, so it ends inside it) ...
        long = threading.Thread(target=_chat, args=(port, 1000, "a long one from elsewhere"))
        long.start()
        _wait_admitted(port, 1)

        def chatter() -> None:  # ... and three short ones arrive once labkit's decode has begun
            _wait_admitted(port, 3)
            for i in range(3):
                _chat(port, 4, f"short one {i} from elsewhere")

        other = threading.Thread(target=chatter)
        other.start()
        # drain_timeout=0: the gauges are checked at every boundary, never waited for (the long request would
        # otherwise be waited out before labkit's window opens: tests/measure/test_drain_sanity.py)
        options = BenchOptions(progress=False, prefill=False, drain_timeout=0)
        res = run_bench(sim.url, _plan(turns=40, n=40), options)
        other.join(30)
        long.join(30)
    sent = len(res.records)
    res.save(tmp_path / "bench.json")
    summary = json.loads((tmp_path / "bench.json").read_text())["summary"]
    assert all(set(f) == {"code", "window", "message"} for f in summary["flags"])
    flags = {f["code"]: f for f in summary["flags"]}
    foreign = flags["foreign-traffic"]
    assert foreign["window"] == "decode"
    assert (
        f"finished {sent + 4} requests while labkit sent {sent}: 4 came from another client"
        in (foreign["message"])
    )
    assert flags["busy-at-start"]["window"] == "decode" and "1 running" in flags["busy-at-start"]["message"]
    e = summary["evidence"]["decode"]
    assert (e["sent"], e["finished"], e["running_start"], e["waiting_start"]) == (sent, sent + 4, 1, 0)
    assert e["running_end"] == 0 and e["waiting_end"] == 0


def test_a_run_alone_on_the_engine_has_no_flags():
    with SimProcess(["--preset", "test"]) as sim:
        res = run_bench(sim.url, _plan(turns=3, prompts=(300,)), BenchOptions(progress=False))
    s = res.summary
    assert s.flags == []
    decode = [r for r in res.records if r.prompt_target == 0]
    e = s.evidence["decode"]
    assert e["sent"] == e["finished"] == len(decode) and e["busy_scrapes"] == 0
    assert (e["running_start"], e["waiting_start"], e["running_end"], e["waiting_end"]) == (0, 0, 0, 0)
    pre = s.evidence["prefill_300"]
    assert pre["sent"] == pre["finished"] == 2 and pre["prefix_cache_hits"] == 0  # warmup + sample
    # how intervals over runs are made from this run's values is said in the run itself
    assert "95 % Student-t interval on run means from 3 runs on (no bootstrap)" in s.method["intervals"]


def test_a_restart_inside_the_decode_window_is_caught_and_drops_its_acceptance():
    # requests: cold 1, warmup 2, turns 3-5; the counters start again from zero before request 4
    sets = ["--set", "fault_restart_request=4", "spec_method=mtp", "spec_k=2", "spec_accept=[0.8,0.5]"]
    with SimProcess(["--preset", "test", *sets]) as sim:
        res = run_bench(sim.url, _plan(turns=3), BenchOptions(progress=False, prefill=False))
    s = res.summary
    (flag,) = [f for f in s.flags if f["code"] == "counter-reset"]
    assert flag["window"] == "decode"
    assert "vllm:request_success_total went backwards from 3 to 1" in flag["message"]
    assert s.evidence["decode"]["counter_resets"][0] == {
        "counter": "vllm:request_success_total",
        "before": 3.0,
        "after": 1.0,
    }
    assert "finished" not in s.evidence["decode"]
    assert not any(k.startswith("accept_") for k in s.measures)  # before/after alone would have given one
    assert any(
        n.startswith("acceptance invalid: decode window: counter vllm:request_success_total") for n in s.notes
    )


def test_a_restart_inside_a_prefill_sample_leaves_it_out():
    # requests: prefill warmup 1, samples 2 and 3; the counters start again from zero before request 3
    with SimProcess(["--preset", "test", "--set", "fault_restart_request=3"]) as sim:
        res = run_bench(
            sim.url, _plan(turns=0, prompts=(300,), repeats=2), BenchOptions(progress=False, decode=False)
        )
    pre = [r for r in res.records if r.phase == "prefill"]
    assert [("counter-reset" in r.flags) for r in pre] == [False, True]
    assert len(res.summary.samples["prefill_300"]) == 1  # the sample of the new boot is not a prefill figure
    (flag,) = res.summary.flags
    assert (flag["code"], flag["window"]) == ("counter-reset", "prefill_300")
    assert "went backwards from 2 to 1" in flag["message"]


def test_repeated_prompts_flag_the_prefill_window(monkeypatch):
    from labkit.measure.prompt import prompts as pr

    monkeypatch.setattr(pr, "nonce", lambda: "fixedfixed00")  # every prompt the same: the cache serves them
    with SimProcess(["--preset", "test"]) as sim:
        res = run_bench(
            sim.url, _plan(turns=0, prompts=(400,), repeats=2), BenchOptions(progress=False, decode=False)
        )
    (flag,) = res.summary.flags
    assert (flag["code"], flag["window"]) == ("prefix-cache-hit", "prefill_400")
    assert "2 of its 3 request windows" in flag["message"]  # the warmup filled the cache
    e = res.summary.evidence["prefill_400"]
    assert e["prefix_cache_hits"] > 0.9 * (e["prefix_cache_queries"] * 2 / 3)


def test_sglang_gauges_are_recorded_from_the_simulator():
    with SimProcess(["--preset", "test", "--set", "flavor=sglang"]) as sim:
        res = run_bench(sim.url, _plan(turns=1), BenchOptions(progress=False, prefill=False))
    e = res.summary.evidence["decode"]
    assert (e["running_start"], e["waiting_start"], e["running_end"], e["waiting_end"]) == (0, 0, 0, 0)
    assert e["finished"] == e["sent"] == len(res.records) and res.summary.flags == []
    assert BenchResult.from_dict(res.to_dict()).summary.evidence == res.summary.evidence
