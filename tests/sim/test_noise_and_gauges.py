"""The simulator's per-request decode-rate noise, its running/waiting gauges and the counter-restart fault: the
settings, the engine's truth, and the same truths through the real server in both flavours.

No assertion is about wall-clock speed: rates are checked on the schedule the engine fixed (its targets), which
the noise sets exactly, not on when the bytes were written.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import pytest

from labkit.sim import add_cli_arguments
from labkit.sim.config import SimConfigError, build_config
from labkit.sim.engine import SimEngine
from labkit.sim.metrics import request_states
from tests.support.sim import SimProc, chat, get_json, metric_sum, metrics, request, stream


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _engine(*sets):
    clock = FakeClock()
    return SimEngine(build_config("test", sets=list(sets)), clock), clock


def _factors(*sets, n=4000):
    eng, _ = _engine(*sets)
    return [eng.admit([200] * 10, 8, 0, True, "chat", True, str(i)).rate_factor for i in range(n)]


# ---- decode_noise ---------------------------------------------------------------------------------


def test_decode_noise_is_seeded_mean_one_and_sd_as_configured():
    factors = _factors("decode_noise=0.05", "seed=11")
    # 4000 draws: the mean's SE is 0.05 / 63 = 0.0008, the SD's about 0.00056
    assert statistics.fmean(factors) == pytest.approx(1.0, abs=0.004)
    assert statistics.stdev(factors) == pytest.approx(0.05, rel=0.06)
    assert _factors("decode_noise=0.05", "seed=11", n=50) == factors[:50]  # reproducible
    assert _factors("decode_noise=0.05", "seed=12", n=50) != factors[:50]  # and the seed matters
    assert set(_factors(n=50)) == {1.0}  # off by default


def test_decode_noise_sets_the_step_schedule_and_leaves_other_draws_alone():
    eng, _ = _engine("decode_tps=100", "decode_noise=0.2", "seed=5", "prefill_tps=1e9")
    a = eng.admit([200] * 10, 50, 0, True, "chat", True, "a")
    assert a.rate_factor != 1.0
    eng.first_token(a, a.t_prefill_end, a.t_prefill_end)
    assert eng.next_target(a, 0.0) == pytest.approx(0.01 / a.rate_factor)  # rate = decode_tps x factor
    # the EOS (and spec) draws come from the request's own stream, as without noise
    noisy, _ = _engine("eos_mean_tokens=10", "decode_noise=0.3", "seed=5")
    plain, _ = _engine("eos_mean_tokens=10", "seed=5")
    lengths = [
        [e.admit([200], 1000, 0, False, "chat", True, str(i)).target_tokens for i in range(30)]
        for e in (noisy, plain)
    ]
    assert lengths[0] == lengths[1]


def test_decode_noise_is_validated_and_settable_like_other_fields():
    with pytest.raises(SimConfigError, match="decode_noise"):
        build_config("test", sets=["decode_noise=-0.1"])
    # a recipe's engine.args "--set" = ["decode_noise=0.01", "seed=3"] becomes one --set with two values
    p = argparse.ArgumentParser()
    add_cli_arguments(p)
    args = p.parse_args(
        ["--preset", "test", "--set", "decode_noise=0.01", "seed=3", "--set", "decode_tps=90"]
    )
    cfg = build_config(args.preset, None, args.sets)
    assert (cfg.decode_noise, cfg.seed, cfg.decode_tps) == (0.01, 3, 90.0)


# ---- gauges and restart, engine level ---------------------------------------------------------------


def test_request_states_count_waiting_until_the_prefill_starts():
    eng, clock = _engine("prefill_tps=1000")
    assert request_states(eng) == (0, 0)
    a = eng.admit(list(range(100, 600)), 4, 0, True, "chat", True, "a")  # prefill 0.5 s
    b = eng.admit(list(range(1000, 1500)), 4, 0, True, "chat", True, "b")  # starts when a's ends
    assert request_states(eng) == (1, 1)
    clock.t = b.t_prefill_start + 0.01
    assert request_states(eng) == (2, 0)
    eng.finish(a, "finished", "length")
    assert request_states(eng) == (1, 0)


def test_restart_zeroes_counters_and_cache_but_keeps_requests():
    eng, _ = _engine()
    a = eng.admit([200] * 40, 4, 0, True, "chat", True, "a")
    eng.first_token(a, 0, 0)
    eng.finish(a, "finished", "length")
    assert eng.c.success == {"length": 1} and eng.c.prefix_queries == 40
    eng.restart()
    assert eng.c.success == {} and eng.c.prefix_queries == 0 and eng.c.generation_tokens == 0
    assert eng.admit([200] * 40, 4, 0, True, "chat", True, "b").cached_tokens == 0  # the cache is gone
    assert len(eng.records) == 2


# ---- through the server --------------------------------------------------------------------------


def _started(*args: str) -> SimProc:
    p = SimProc(["--preset", "test", *args])
    p.wait_up()
    return p


def test_noise_truth_is_reproducible_across_servers():
    sets = ["--set", "decode_noise=0.1", "seed=4", "decode_tps=400"]
    seen = []
    for _ in range(2):
        p = _started(*sets)
        try:
            for i in range(4):
                assert stream(p.port, "/v1/chat/completions", chat(f"noise {i}", 12)).status == 200
            seen.append(get_json(p.port, "/sim/requests")["requests"])
        finally:
            p.stop()
    factors = [[r["rate_factor"] for r in reqs] for reqs in seen]
    assert factors[0] == factors[1] and len(set(factors[0])) == 4
    for r in seen[0]:  # one at a time: the schedule runs at exactly decode_tps x factor
        assert r["scheduled_decode_tps"] == pytest.approx(400 * r["rate_factor"], rel=1e-6)


@pytest.mark.parametrize(
    "flavor,running,waiting",
    [
        ("vllm", "vllm:num_requests_running", "vllm:num_requests_waiting"),
        ("sglang", "sglang:num_running_reqs", "sglang:num_queue_reqs"),
    ],
)
@pytest.mark.parametrize(
    "schedule",
    [
        ["max_num_batched_tokens=0"],  # per-request: one prefill at a time, the second waits for it
        ["max_num_batched_tokens=8192", "max_num_seqs=1"],  # steps: one running sequence, the second waits
    ],
    ids=["per-request", "steps"],
)
def test_gauges_show_the_true_running_and_waiting_requests(flavor, running, waiting, schedule):
    p = _started(
        "--set", f"flavor={flavor}", "prefill_tps=100", *schedule
    )  # 100 prompt tokens prefill for 1 s
    try:
        prompt = " ".join(f"w{i}" for i in range(100))
        body = chat(prompt, 2)
        threads = [
            threading.Thread(target=request, args=(p.port, "POST", "/v1/chat/completions", body))
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while len(get_json(p.port, "/sim/requests")["requests"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        m, truth = metrics(p.port), get_json(p.port, "/sim/requests")
        # the first is prefilling (running), the second waits for the one prefill slot
        assert (metric_sum(m, running), metric_sum(m, waiting)) == (1, 1)
        assert (truth["running"], truth["waiting"]) == (1, 1)
        for t in threads:
            t.join(20)
        m = metrics(p.port)
        assert (metric_sum(m, running), metric_sum(m, waiting)) == (0, 0)
    finally:
        p.stop()


def test_restart_fault_sends_the_counters_back_to_zero():
    p = _started("--set", "fault_restart_request=2")
    try:
        stream(p.port, "/v1/chat/completions", chat("first", 5))
        assert metric_sum(metrics(p.port), "vllm:request_success_total") == 1
        stream(p.port, "/v1/chat/completions", chat("first", 5))  # the same prompt: no cache after a restart
        m = metrics(p.port)
        assert (
            metric_sum(m, "vllm:request_success_total") == 1
            and metric_sum(m, "vllm:generation_tokens_total") == 5
        )
        assert metric_sum(m, "vllm:prefix_cache_hits_total") == 0
        assert len(get_json(p.port, "/sim/requests")["requests"]) == 2
        assert any("counters reset before request 2" in line for line in p.lines)
    finally:
        p.stop()
