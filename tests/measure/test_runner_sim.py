"""End to end against the simulator in a subprocess: the oracle's ground truth checks what the bench measured."""

import dataclasses
import time
from pathlib import Path

import pytest

from labkit.measure import WORKLOADS, BenchOptions, BenchResult, render, run_bench
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from labkit.sim.oracle import SimOracle

pytestmark = pytest.mark.alone  # timing truths within a few percent (tests/support/workers.py)


def _plan(turns=2, n=24, conc=(1, 2), warmup=1, prompts=(), repeats=1, timeout=20.0):
    return MeasurePlan(
        api="chat",
        runs=1,
        decode=DecodePlan(conc, turns, n, warmup),
        prefill=PrefillPlan(prompts, repeats),
        timeout=timeout,
    )


def _truth_by_id(sim):
    return {t["id"]: t for t in sim.truth()["requests"]}


def test_cold_turn_detected_and_matches_truth(tmp_path):
    # windows of >= 0.3 s, so a scheduling hiccup on a busy host stays well inside the 5% tolerance
    with SimOracle(sets={"cold_requests": 1, "cold_decode_tps": 40, "decode_tps": 120}) as sim:
        res = run_bench(sim.url, _plan(n=40, prompts=(300,)), BenchOptions(progress=False))
        truth = _truth_by_id(sim)
    cold = [r for r in res.records if r.cold]
    assert len(cold) == 1 and cold[0].ok
    assert truth[cold[0].response_id]["cold"] and truth[cold[0].response_id]["index"] == 1
    assert not any(truth[r.response_id]["cold"] for r in res.records if not r.cold)
    m = res.summary.measures
    assert m["decode_c1_cold"] < m["decode_c1"]
    for r in res.records:
        t = truth[r.response_id]
        if r.decode_tps is not None:
            assert r.decode_tps == pytest.approx(t["true_decode_tps"], rel=0.05)
    assert m["prefill_300"] > 0 and "prefill (300 prompt)" in render(res.summary)
    assert "cold turn" in render(res.summary)
    # round trip through one JSON file
    back = BenchResult.load(res.save(tmp_path / "bench.json"))
    assert back.records == res.records and back.summary == res.summary and back.groups == res.groups
    assert back.provenance["model"] == "sim-test" and "git_sha" in back.provenance
    assert back.provenance["simulated"] is True and back.provenance["engine_version"]
    assert back.provenance["token_sources"] == ["continuous_usage"]
    assert back.scrapes and all("vllm:" in text for text in back.scrapes.values())


def test_no_cold_turn_when_engine_already_served():
    with SimOracle(sets={"cold_requests": 1}) as sim:
        run_bench(sim.url, _plan(turns=1, conc=(1,)), BenchOptions(progress=False))
        res = run_bench(sim.url, _plan(turns=1, conc=(1,)), BenchOptions(progress=False, cold_expected=True))
    assert not any(r.cold for r in res.records)
    assert any("cold turn not recorded" in n for n in res.summary.notes)


def test_no_cold_turn_when_an_sglang_engine_already_served():
    with SimOracle(sets={"flavor": "sglang"}) as sim:
        run_bench(sim.url, _plan(turns=1, conc=(1,)), BenchOptions(progress=False))
        res = run_bench(sim.url, _plan(turns=1, conc=(1,)), BenchOptions(progress=False, cold_expected=True))
    assert not any(r.cold for r in res.records)
    assert any("cold turn not recorded" in n for n in res.summary.notes)


def test_multi_token_chunks_counted_and_acceptance_equals_truth():
    sets = {"spec_method": "mtp", "spec_k": 3, "spec_accept": [0.9, 0.7, 0.5], "decode_tps": 150}
    with SimOracle(sets=sets) as sim:
        res = run_bench(sim.url, _plan(n=60), BenchOptions(progress=False))
        truth = _truth_by_id(sim)
    decode = [r for r in res.records if r.phase in ("decode", "warmup")]
    assert all(r.ok and r.output_tokens == 60 and sum(r.chunk_n) == 60 for r in decode)
    assert all(r.output_tokens_source == "continuous_usage" for r in decode)
    assert all(r.chunks == truth[r.response_id]["chunks"] for r in decode)
    assert any(n > 1 for r in decode for n in r.chunk_n)  # several tokens per chunk
    assert sum(r.chunks for r in decode) < sum(r.output_tokens for r in decode)
    ts = [truth[r.response_id] for r in decode]
    real = sum(t["accepted"] for t in ts) / sum(t["drafts"] for t in ts)
    m = res.summary.measures
    assert m["accept_per_draft"] == pytest.approx(real, abs=1e-9)
    # The simulator exports no per-step histograms: τ is the stream's tokens per chunk, one chunk per step
    steps = sum(t["chunks"] for t in ts)
    assert m["accept_length"] == pytest.approx(sum(t["completion_tokens"] for t in ts) / steps, abs=1e-9)
    assert (
        m["accept_length_stream"] == m["accept_length"] and "SSE chunk" in res.summary.method["accept_length"]
    )
    assert m["accept_k"] == 3 and "per-position series" in res.summary.method["accept_k"]
    for r in decode:
        assert r.decode_tps == pytest.approx(truth[r.response_id]["true_decode_tps"], rel=0.05)


def test_every_decode_turn_and_group_carries_the_engines_own_window():
    """/metrics is scraped between the decode requests: each c1 turn and each cK group has its own window."""
    with SimOracle(sets={"decode_tps": 300}) as sim:
        res = run_bench(sim.url, _plan(n=20), BenchOptions(progress=False))
    decode = [r for r in res.records if r.prompt_target == 0]
    assert decode and all(r.server_window and r.server_ttft_s is not None for r in decode)
    assert {r.server_window["requests"] for r in decode if r.concurrency == 1} == {1}
    assert {r.server_window["requests"] for r in decode if r.concurrency == 2} == {2}
    assert all(g.server_window["generation_tokens"] == 40 for g in res.groups)
    assert all(r.server_window["generation_tokens"] == 20 for r in decode if r.concurrency == 1)
    assert "ttft_c1_server" in res.summary.measures and "engine's own" in res.summary.method["ttft_c1_server"]
    windows = sorted(k for k in res.scrapes if k.startswith("decode.0."))
    assert len(windows) == len([r for r in decode if r.concurrency == 1]) + len(res.groups)


def test_reused_prompts_are_flagged_and_excluded(monkeypatch):
    from labkit.measure.prompt import prompts as pr

    monkeypatch.setattr(pr, "nonce", lambda: "samesame")  # every prompt identical: the prefix cache hits
    with SimOracle() as sim:
        res = run_bench(
            sim.url, _plan(turns=0, prompts=(400,), repeats=2), BenchOptions(progress=False, decode=False)
        )
    pre = [r for r in res.records if r.phase == "prefill"]
    assert len(pre) == 2 and all("prefix-cache-hit" in r.flags for r in pre)
    assert "prefill_400" not in res.summary.measures
    assert res.summary.measures["prefix_cache_hit_ratio"] > 0.9
    assert any("flagged" in n for n in res.summary.notes)


def test_unique_prompts_hit_length_and_miss_cache():
    with SimOracle() as sim:
        res = run_bench(
            sim.url, _plan(prompts=(1000, 3000), repeats=2), BenchOptions(progress=False, decode=False)
        )
    pre = [r for r in res.records if r.phase == "prefill"]
    assert len(pre) == 4
    for r in pre:
        assert abs(r.prompt_tokens - r.prompt_target) <= 0.01 * r.prompt_target
        assert r.cached_tokens <= 16 and not r.flags
    assert res.summary.measures["prefix_cache_hit_ratio"] < 0.01
    assert res.provenance["prompt_length_counter"] == "server /tokenize"


def test_http_error_and_stalled_stream_are_failed_records():
    # generation request 3 gets HTTP 500; request 5 stalls after 4 tokens (the client's timeout ends it)
    sets = {"fault_http500_request": 3, "fault_stall_request": 5, "fault_stall_after_tokens": 4}
    with SimOracle(sets=sets) as sim:
        res = run_bench(sim.url, _plan(turns=4, n=16, conc=(1,), timeout=2.0), BenchOptions(progress=False))
    failed = [r for r in res.records if not r.ok]
    assert len(failed) == 2 and res.summary.n_failed == 2
    assert any("HTTP 500" in r.error for r in failed) and any("timeout" in r.error for r in failed)
    assert any("failed request" in n for n in res.summary.notes)
    # a window with failures is invalid for its figures (docs/measurement.md, "Output sanity"): the 2 warm turns
    # that succeeded would have given decode_c1, which is kept aside, not reported
    sanity = res.summary.sanity["decode_c1"]
    assert (sanity["requests"], sanity["failed"], sanity["empty"], sanity["truncated"]) == (4, 2, 1, 1)
    assert "decode_c1" not in res.summary.measures and sanity["excluded"]["decode_c1"] > 0
    assert {f["code"] for f in res.summary.flags} == {"failed-requests"}


def test_chunks_that_reach_the_client_together_neither_inflate_nor_count_as_decode():
    # request 4 (a warm turn): its first 20 tokens are written together once generated, as a client that fell
    # behind reads them; request 5: everything after the first token arrives in one write at the end.
    sets = {"decode_tps": 100, "fault_hold_request": 4, "fault_hold_from": 0, "fault_hold_until": 20}
    with SimOracle(sets=sets) as sim:
        res = run_bench(sim.url, _plan(turns=3, n=40, conc=(1,)), BenchOptions(progress=False))
        truth = _truth_by_id(sim)
    held = next(r for r in res.records if truth[r.response_id]["index"] == 4)
    assert held.ok and held.n_first >= 20 and "burst-read" not in held.flags
    assert held.decode_tps == pytest.approx(truth[held.response_id]["true_decode_tps"], rel=0.05)  # not ~2x
    sets = {"decode_tps": 100, "fault_hold_request": 4, "fault_hold_from": 1, "fault_hold_until": 0}
    with SimOracle(sets=sets) as sim:
        res = run_bench(sim.url, _plan(turns=3, n=40, conc=(1,)), BenchOptions(progress=False))
        truth = _truth_by_id(sim)
    held = next(r for r in res.records if truth[r.response_id]["index"] == 4)
    assert held.ok and "burst-read (39 of 39" in held.flags
    assert len(res.summary.samples["decode_c1"]) == 2  # 3 warm turns, the burst-read one excluded
    assert any("1 burst-read sample(s) excluded" in n for n in res.summary.notes)
    others = [r for r in res.records if r is not held and r.decode_tps is not None]
    assert others and not any("burst-read" in r.flags for r in others)


def test_engine_dying_mid_stream_is_a_failure_not_a_crash():
    sets = {"fault_exit_request": 2, "fault_exit_after_tokens": 5}
    with SimOracle(sets=sets) as sim:
        res = run_bench(sim.url, _plan(turns=2, n=16, conc=(1,), timeout=5.0), BenchOptions(progress=False))
    assert res.records[0].ok
    assert not res.records[1].ok and res.records[1].error
    assert all(not r.ok for r in res.records[1:])
    assert "decode_c1" not in res.summary.measures


@pytest.mark.parametrize("metrics", [True, False])
def test_sglang_flavor_acceptance(metrics, monkeypatch):
    """SGLang: counter deltas (prefill token taken out) or, without spec counters, flush-then-read /server_info."""
    from labkit.measure.runner import Bench

    async def no_metrics(self, key):
        self.log.has_metrics = False
        return None

    if not metrics:  # an SGLang launched without --enable-metrics
        monkeypatch.setattr(Bench, "scrape", no_metrics)
    sets = {
        "flavor": "sglang",
        "spec_method": "eagle",
        "spec_k": 3,
        "spec_accept": [0.9, 0.7, 0.5],
        "decode_tps": 400,
    }
    with SimOracle(sets=sets) as sim:
        res = run_bench(sim.url, _plan(n=60, conc=(1,)), BenchOptions(progress=False))
        truth = _truth_by_id(sim)
    ts = [truth[r.response_id] for r in res.records]
    m = res.summary.measures
    assert m["accept_k"] == 3
    if metrics:
        emitted = sum(t["completion_tokens"] - 1 - t["steps"] for t in ts) / sum(t["steps"] for t in ts)
        assert m["accept_per_draft"] == pytest.approx(emitted, abs=1e-9)
    else:
        assert "server_info" in res.summary.method["accept_length"]
        real = sum(t["accepted"] for t in ts) / sum(t["drafts"] for t in ts)
        assert m["accept_per_draft"] == pytest.approx(real, abs=0.05)


@pytest.mark.parametrize("transport,backend", [("sdk", "aiohttp"), ("direct", "httpx"), ("sdk", "httpx")])
def test_other_transports_measure_the_same(transport, backend, monkeypatch):
    if backend == "httpx":
        monkeypatch.setenv("LABKIT_HTTP", "httpx")
    monkeypatch.setenv("LABKIT_LOOP", "asyncio")  # and the standard event loop
    with SimOracle(sets={"decode_tps": 100}) as sim:
        res = run_bench(
            sim.url, _plan(turns=2, n=40, conc=(1,)), BenchOptions(progress=False, transport=transport)
        )
        truth = _truth_by_id(sim)
    assert res.provenance["http_backend"] == backend and res.provenance["transport"] == transport
    assert res.provenance["event_loop"] == "asyncio.unix_events"
    for r in res.records:
        assert r.ok and r.output_tokens == 40
        assert r.decode_tps == pytest.approx(truth[r.response_id]["true_decode_tps"], rel=0.05)


def test_interrupted_run_keeps_partial_records(tmp_path, monkeypatch):
    async def boom(session, rep):
        raise KeyboardInterrupt

    monkeypatch.setitem(WORKLOADS, "prefill", dataclasses.replace(WORKLOADS["prefill"], run=boom))
    out = tmp_path / "partial.json"
    with SimOracle() as sim, pytest.raises(KeyboardInterrupt):
        run_bench(
            sim.url, _plan(turns=1, conc=(1,), prompts=(200,)), BenchOptions(progress=False, save_to=out)
        )
    back = BenchResult.load(out)
    assert back.provenance["partial"] and "KeyboardInterrupt" in back.provenance["error"]
    assert len(back.records) == 3 and all(r.ok for r in back.records)  # cold, warmup, one turn


def test_works_inside_a_running_event_loop():
    import asyncio

    async def notebook_cell(url):
        return run_bench(
            url, _plan(turns=1, conc=(1,)), BenchOptions(progress=False)
        )  # sync call, loop already running

    with SimOracle() as sim:
        res = asyncio.run(notebook_cell(sim.url))
    assert res.summary.n_ok == 3


def test_interrupt_inside_a_running_loop_stops_at_once_and_keeps_what_was_measured(tmp_path):
    """A Jupyter kernel interrupt (SIGINT -> KeyboardInterrupt in the main thread) while run_bench measures on
    its worker thread: the plan stops, the partial result is saved, KeyboardInterrupt reaches the cell."""
    import asyncio
    import signal
    import threading

    out = tmp_path / "partial.json"

    def interrupt_after_two_served(sim):
        # Interrupt once the sim has served two requests: a fixed delay would depend on how fast this machine
        # reaches the first request.
        main = threading.main_thread().ident
        while len(sim.truth()["requests"]) < 2:
            time.sleep(0.05)
        signal.pthread_kill(main, signal.SIGINT)

    async def notebook_cell(url):
        return run_bench(url, _plan(turns=20, n=40, conc=(1,)), BenchOptions(progress=False, save_to=out))

    with SimOracle(sets={"decode_tps": 100}) as sim:
        threading.Thread(target=interrupt_after_two_served, args=(sim,), daemon=True).start()
        loop = asyncio.new_event_loop()  # like ipykernel: a running loop, SIGINT left to Python's handler
        try:
            with pytest.raises(KeyboardInterrupt):
                loop.run_until_complete(notebook_cell(sim.url))
        finally:
            loop.close()
        served = len(sim.truth()["requests"])
    assert served <= 4  # 22 planned, one at a time; the interrupt came after the second was served
    back = BenchResult.load(out)
    assert back.provenance["partial"] and 0 < len(back.records) <= served


@pytest.mark.parametrize("engine", ["llamacpp", "none"])
def test_prompt_sizing_without_a_tokenize_endpoint(engine, monkeypatch):
    """llama-cpp-python has only /extras/tokenize/count (raw text); some engines have nothing: calibrate."""
    from labkit.measure.request.client import StreamClient

    orig = StreamClient.post_json

    async def post_json(self, path, body, timeout=60.0):
        if path == "/tokenize":
            return 404, {"detail": "Not Found"}
        if path == "/extras/tokenize/count":
            if engine != "llamacpp":
                return 404, {"detail": "Not Found"}
            status, data = await orig(
                self, "/tokenize", {"prompt": body["input"], "add_special_tokens": False}
            )
            return status, {"count": data["count"]}
        return await orig(self, path, body, timeout)

    monkeypatch.setattr(StreamClient, "post_json", post_json)
    with SimOracle() as sim:
        res = run_bench(
            sim.url, _plan(prompts=(2000,), repeats=2), BenchOptions(progress=False, decode=False)
        )
    kind = res.provenance["prompt_length_counter"]
    assert ("extras" in kind) if engine == "llamacpp" else ("linear fit" in kind)
    pre = [r for r in res.records if r.phase == "prefill"]
    assert len(pre) == 2
    for r in pre:
        assert r.prompt_tokens_source == "usage"
        if engine == "llamacpp":  # a server count: exact to the tolerance
            assert abs(r.prompt_tokens - 2000) <= 20, r.prompt_tokens
        else:  # an estimate: close, and flagged (so excluded) whenever it misses the 1% bound
            assert abs(r.prompt_tokens - 2000) <= 60, r.prompt_tokens
            assert (abs(r.prompt_tokens - 2000) <= 20) == ("prompt-length-off" not in r.flags)
    clean = [r.prefill_tps for r in pre if "prompt-length-off" not in r.flags]
    assert res.summary.samples.get("prefill_2000", []) == clean


def test_io_probe_deltas_and_completions_api(tmp_path):
    from dataclasses import replace

    from labkit.measure import LocalNfsProbe

    fixture = (Path(__file__).parents[1] / "support" / "fixtures" / "mountstats.txt").read_text()
    stats = tmp_path / "mountstats"
    stats.write_text(fixture)

    class GrowingProbe(LocalNfsProbe):
        """Reads the fixture; the second sample sees 258 kB more served by the NAS."""

        calls = 0

        def sample(self):
            GrowingProbe.calls += 1
            if GrowingProbe.calls == 2:
                stats.write_text(fixture.replace("1000 20 300 0 500000", "1000 20 300 0 758000"))
            return super().sample()

    with SimOracle() as sim:
        res = run_bench(
            sim.url,
            replace(_plan(turns=1, conc=(1,)), api="completions"),
            BenchOptions(progress=False, io_hooks=[GrowingProbe(stats)]),
        )
    assert all(r.ok and r.api == "completions" for r in res.records)
    assert res.summary.measures["nfs_read_bytes"] == 258000
    assert res.summary.measures["nfs_read_bytes_per_completion"] == 258000 / 3
    assert res.io["localhost-nfs"]["/mnt/nas/hf:serverreadbytes"] == 258000


def test_repeated_plan_pools_samples_and_counters():
    from dataclasses import replace

    sets = {"spec_method": "mtp", "spec_k": 2, "spec_accept": [0.8, 0.5], "decode_tps": 150}
    with SimOracle(sets=sets) as sim:
        res = run_bench(sim.url, replace(_plan(turns=1, n=40), runs=2), BenchOptions(progress=False))
        truth = _truth_by_id(sim)
    assert [g.group for g in res.groups] == [0, 1] and [g.rep for g in res.groups] == [0, 1]
    assert sum(r.cold for r in res.records) == 1 and next(r for r in res.records if r.cold).rep == 0
    assert {r.rep for r in res.records} == {0, 1}
    assert len(res.summary.samples["decode_c1"]) == 2 and len(res.summary.samples["decode_c2_agg"]) == 2
    ts = list(truth.values())
    real = sum(t["accepted"] for t in ts) / sum(t["drafts"] for t in ts)
    assert res.summary.measures["accept_per_draft"] == pytest.approx(real, abs=1e-9)


def test_no_nfs_mount_means_no_nfs_figure_not_zero(tmp_path):
    from labkit.measure import LocalNfsProbe

    stats = tmp_path / "mountstats"
    stats.write_text("device /dev/sda1 mounted on / with fstype ext4\n")
    with SimOracle() as sim:
        res = run_bench(
            sim.url, _plan(turns=1, conc=(1,)), BenchOptions(progress=False, io_hooks=[LocalNfsProbe(stats)])
        )
    assert "nfs_read_bytes" not in res.summary.measures
    assert "nfs_read_bytes_per_completion" not in res.summary.measures
    assert any(
        "shared-NFS reads not measured: no NFS mount seen by localhost-nfs" in n for n in res.summary.notes
    )


def test_nfs_counter_reset_is_reported_not_summed():
    from labkit.measure import RunSummary
    from labkit.measure.summary.counters import nfs_summary

    s = RunSummary()
    nfs_summary(s, {"n1-nfs": {"/nas:serverreadbytes": 5e6}, "n2-nfs": {"/nas:serverreadbytes.reset": 1.0}})
    assert "nfs_read_bytes" not in s.measures and any("went backwards on n2-nfs" in n for n in s.notes)
    s = RunSummary()
    nfs_summary(s, {"n1-nfs": {"/nas:serverreadbytes": 5e6}, "n2-nfs": {}})
    assert s.measures["nfs_read_bytes"] == 5e6 and "n1-nfs" in s.method["nfs_read_bytes"]
