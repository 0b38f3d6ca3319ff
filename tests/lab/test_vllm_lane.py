"""The tiny-vllm lane end to end against a real vLLM (the CPU build): `lane.up()` boots `vllm serve`, the boot
facts come from its real log, labkit measures it, stores the run, and teardown leaves nothing behind, also
when the engine is killed mid-run or Ctrl-C arrives during boot.

The boot facts, the measurement and the killed engine read the session's shared lane (spec = ngram,
tests/support/vllm_fixtures.py): vLLM CPU boots in 40-65 s here; the kill runs after every other test on it.
Ctrl-C during boot and the notebook's cold first turn each need an engine of their own (`vllm_fresh`). Agreement with vLLM's own
server-side figures is a timing comparison: benchmarks/bench_vllm_agreement.py, not an assertion here.
"""

from __future__ import annotations

import dataclasses
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from labkit import lab
from labkit import notebooks as nbk
from labkit.measure import BenchOptions, render, run_bench
from labkit.recipe.lookup import load_plan
from labkit.serve import Lane
from tests.support.vllm import vllm_available
from tests.support.vllm_lanes import short_plan

pytestmark = pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")


def test_boot_facts_come_from_the_real_log(vllm_shared):
    """The facts the shared lane's one boot left: whatever ran on the engine since does not change them."""
    boot = vllm_shared.endpoint.boot
    assert boot.engine_version.startswith("0.32")  # the engine-core line (the banner draws it in block art)
    # 1 GiB of KV (VLLM_CPU_KVCACHE_SPACE=1) / (4 layers x K and V x 128 wide x 2 bytes) = 524,288 tokens
    assert (boot.kv_pool_tokens, boot.kv_pool_context, boot.max_concurrency) == (524_288, 16_384, 32.0)
    assert "CPU KV cache size: 524,288 tokens" in boot.lines["kv_tokens"]
    assert boot.spec_tokens == 4  # the engine's own report of K
    assert boot.engine_init_seconds > 0 and boot.weights_seconds is not None
    assert boot.model_init_seconds is not None and boot.boot_seconds > boot.engine_init_seconds
    assert "Application startup complete" in boot.lines["ready"]
    gloo = boot.transport[
        "localhost"
    ]  # vLLM CPU's workers use gloo (docs/engines.md, "NCCL transport lines")
    assert gloo["kind"] == "gloo" and "backend=gloo" in gloo["line"] and not gloo["libibverbs_missing"]
    assert all(len(line) <= 500 for line in boot.lines.values())  # the 3.5 KB config line as an excerpt
    assert str(vllm_shared.plan.model.path).endswith("-hf")  # the HF build of the tiny model
    log = (vllm_shared.root / "run" / "logs" / "localhost.log").read_text()
    assert "Initializing a V1 LLM engine (v0.32" in log  # the node's log is saved in the run folder


def test_measures_decode_c2_prefill_and_acceptance_of_4(vllm_lane, tmp_path):
    plan, ep = vllm_lane.plan, vllm_lane.endpoint
    # as the lab path measures it: the tiny random model loops by nature (model.loops), which is reported, not
    # gating; the recipe turns the engine's per-request figures on. No cold turn: the engine is shared.
    options = BenchOptions(
        model=ep.model,
        progress=False,
        lane=plan.recipe,
        loops_expected=plan.model.loops,
        engine_metrics_asked=plan.engine_metrics_asked,
        cold_expected=False,
    )
    # as `labkit bench tiny-vllm --url URL` measures it: stored under the lane, marked as an endpoint it did not boot
    once = dataclasses.replace(plan.measure, runs=1)
    (done,) = lab.measure_endpoint(plan, once, ep.base_url, options, "url", tmp_path / "results")
    result = done.result
    recs = result.records
    assert recs and all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    m = result.summary.measures
    assert m["decode_c1"] > 0 and m["prefill_1024"] > 0 and m["decode_c2_agg"] > 0
    dec = [r for r in recs if r.phase == "decode"]
    assert {r.output_tokens_source for r in dec} == {"continuous_usage"}  # vLLM's per-chunk usage
    assert all(r.output_tokens == 64 for r in dec)
    # acceptance from vLLM's real spec-decode counters: "x of 4" with K an integer
    assert m["accept_k"] == 4
    assert 0 < m["accept_per_draft"] <= 4
    text = render(result.summary)
    assert re.search(r"acceptance\s+[\d.]+ of 4\s", text), text  # "x of 4": K an integer, from the config
    # the engine's own per-request figures, stored beside labkit's (docs/measurement.md, "Per-request server truth")
    assert all(r.engine_metrics and r.engine_ttft_s is not None for r in dec)
    assert "decode_c2_accept_per_draft" in m and "server truth" in text

    from labkit import report
    from labkit.store import load_results

    data = load_results(tmp_path / "results")
    (doc,) = data.docs.values()
    assert doc.path == done.path and doc.provenance.raw["endpoint_origin"] == "url"
    assert {"decode_c1", "prefill_1024", "decode_c2_agg"} <= set(data.measures["measure"])
    md = report.generate(tmp_path / "results", write=False, plots=False).markdown
    assert plan.label in md


def test_engine_killed_mid_run_gives_failed_records_and_leaves_nothing(vllm_shared_last):
    """The shared lane, after every other test on it (`vllm_shared_last`), because the test kills it: SIGKILL to
    the API server alone while a stream runs; the engine core and worker it spawned are orphaned in the lane's
    process group, and teardown must still find and remove them."""
    shared = vllm_shared_last
    ep, plan = shared.endpoint, shared.plan
    measure = short_plan(
        concurrency=(1,), turns=2, output_tokens=8000, warmup=0, prompt_tokens=(), timeout=30.0
    )
    api_server = int((shared.env.state_dir / "lanes" / plan.lane_id / "localhost.pid").read_text())
    assert shared.env.processes()  # API server, engine core and worker, before the kill
    killer = threading.Timer(2.0, os.kill, (api_server, signal.SIGKILL))
    killer.start()
    result = run_bench(ep.base_url, measure, BenchOptions(model=ep.model, progress=False, prefill=False))
    killer.join()
    recs = result.records
    assert recs and not any(r.ok for r in recs)
    assert all(r.error and r.decode_tps is None for r in recs)
    assert not any(k.startswith("decode") for k in result.summary.measures)
    assert result.summary.n_ok == 0 and result.summary.n_failed == len(recs)
    shared.close()  # down, then: status absent, no leftover, no process of the lane's token


def test_ctrl_c_during_boot_leaves_nothing(vllm_fresh):
    """A fresh engine, because Ctrl-C must arrive while it boots."""
    lane = vllm_fresh.lane()
    saved_log = lane.sink.path / "logs" / "localhost.log"

    def ctrl_c_once_the_engine_loads() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if saved_log.exists() and "Starting to load model" in saved_log.read_text(errors="replace"):
                break
            time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=ctrl_c_once_the_engine_loads, daemon=True)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            lane.start()
    finally:
        t.join(130)
        lane.down()
    assert "Starting to load model" in saved_log.read_text(errors="replace")  # it was really booting
    assert lane.status() == {"localhost": "absent"} and lane.leftovers() == {}
    assert vllm_fresh.processes() == []  # API server, engine core and worker: the whole group is gone


def test_bench_notebook_runs_the_default_lane_end_to_end(vllm_fresh, tmp_path):
    """`labkit run bench -p recipe tiny-vllm` with the workload parameters (the 4,096-token prompt only, two
    content categories, two context depths, three-turn agentic sessions, load levels c1 and c2): the recipe's
    own plan and port, through papermill; the run is stored and shows in the tables, the notebook shows the
    content, depth, turn and load tables and the load curve; the lane is torn down. A fresh engine, booted by the notebook: the run's first turn is its cold
    turn. (A 12,600-token prefill takes 20 s on this CPU; `-p prefill` leaves the recipe's two out.)"""
    from labkit import report
    from labkit.store import load_results

    argv = [
        sys.executable,
        "-m",
        "labkit",
        "run",
        "bench",
        "-p",
        "recipe",
        "tiny-vllm",
        "-p",
        "results",
        str(tmp_path / "results"),
        *(
            "-p",
            "prefill",
            "4096",
            "-p",
            "content",
            "prose,code",
            "-p",
            "depth",
            "0,1024",
            "-p",
            "agentic",
            "3",
            "-p",
            "load",
            "1,2",
        ),
        "-o",
        str(tmp_path / "out.ipynb"),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900)  # vllm_fresh's environment
    assert out.returncode == 0, out.stderr[-3000:]
    data = load_results(tmp_path / "results")
    (doc,) = data.docs.values()
    assert doc.status == "complete" and doc.recipe == "tiny-vllm"
    assert doc.boot.raw["kv_pool_tokens"] == 524_288 and str(doc.boot.engine_version).startswith("0.32")
    m = doc.summary.measures
    assert {"decode_c1", "decode_c1_cold", "decode_c2_agg", "prefill_4096"} <= set(m)
    assert "prefill_12600" not in m  # left out by `-p prefill 4096`
    assert {"decode_c1@code", "depth_1024_ttft_cached", "agentic_ttft_t3", "depth_hit_agreement"} <= set(m)
    assert m["depth_hit_agreement"] == 1 and m["agentic_hit_agreement"] == 1  # vLLM's own hits, as expected
    shown = [t.splitlines()[0] for t in nbk.shown_tables(tmp_path / "out.ipynb")]
    for title in (
        "Decode c1 and acceptance by prompt content",
        "TTFT, prefill and decode by depth",
        "TTFT by turn",
        "Latency and throughput under load",
    ):
        assert any(s.startswith(title) for s in shown), shown
    # the levels against the engine's own counters, and the curve beside the run
    assert m["load_peak_concurrency@load=2"] == 2 and m["load_errors@load=1"] == 0
    assert doc.summary.raw["load"]["load@load=2"]["answered"] == 16  # 4 a stream, at least 16
    pngs = {p.name for p in (tmp_path / "results").rglob("*.png")}
    assert {"latency_throughput.png", "ttft_distribution.png"} <= pngs, pngs
    md = report.generate(tmp_path / "results", write=False, plots=False).markdown
    assert "vLLM tiny CPU" in md
    assert Lane(load_plan("tiny-vllm"), progress=None).status() == {"localhost": "absent"}
    assert not list(vllm_fresh.state_dir.glob("lanes/*/*.pid")) and vllm_fresh.processes() == []
