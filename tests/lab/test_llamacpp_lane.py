"""The tiny-llamacpp lane end to end: labkit boots the real llama_cpp.server, reads its boot facts, measures
it with `labkit.measure`, and tears it down; engine quirks must show up in the records, not as wrong numbers.

The labkit-vs-independent-client agreement (issue 8's 5% bound) is a timing figure, so it is checked by
benchmarks/bench_llamacpp_agreement.py (run by .ci/run), never by timed assertions here.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
from pathlib import Path

import pytest

from labkit import tinymodel
from labkit.measure import BenchOptions, run_bench
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from labkit.recipe.lookup import load_plan
from labkit.serve import Lane
from labkit.store import RunFolderSink
from tests.support.llamacpp import free_port, have_llama_cpp

pytestmark = pytest.mark.skipif(
    not have_llama_cpp(),
    reason="llama_cpp is not importable: install the 'llamacpp' extra (pip install -e '.[llamacpp]')",
)
ROOT = Path(__file__).resolve().parents[2]


def tiny_plan(port: int, size: str = "small", **measure):
    """The shipped recipe on our own port with a short plan; the 64x2 model by default (12.6K prefill ~4x faster),
    built (once) and pointed at as `labkit up` and `lab.measure` do before starting a Lane."""
    plan = load_plan("tiny-llamacpp", size=size)
    m = plan.measure
    new = MeasurePlan(
        api=m.api,
        runs=1,
        decode=DecodePlan(
            measure.get("concurrency", (1, 2)),
            measure.get("turns", 2),
            measure.get("output_tokens", 64),
            measure.get("warmup", 1),
        ),
        prefill=PrefillPlan(measure.get("prompt_tokens", ()), measure.get("repeats", 1)),
        timeout=measure.get("timeout", 120.0),
    )
    plan = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, port=port), measure=new)
    return tinymodel.materialize(plan)


@pytest.fixture
def cache(tmp_path_factory, monkeypatch):
    root = tmp_path_factory.getbasetemp() / "labkit-cache"  # one build for the whole session
    monkeypatch.setenv("LABKIT_CACHE", str(root))
    return root


def test_lane_boots_measures_and_records_the_quirks(tmp_path, cache, local_env):
    plan = tiny_plan(free_port(), prompt_tokens=(4096, 12600), repeats=1)  # the recipe's lengths
    lane = Lane(plan, sink=RunFolderSink(tmp_path / "run"), poll=0.1, stop_grace=5)
    with lane.up() as ep:
        assert ep.model == "tiny" and ep.base_url.endswith(f":{plan.engine.port}/v1")
        # Boot facts from the llama.cpp log: n_ctx and the KV cache cells, raw lines kept.
        assert ep.boot.kv_pool_context == 16384 and ep.boot.kv_pool_tokens == 16384
        assert "16384 cells" in ep.boot.lines["kv_tokens"] and "Uvicorn running" in ep.boot.lines["ready"]
        assert str(cache) in " ".join(lane.launches()[0].argv)  # served the built model from the cache
        # as the lab path measures it: the tiny random model loops by nature (model.loops), reported, not gating
        options = BenchOptions(
            model=ep.model, progress=False, lane=plan.recipe, loops_expected=plan.model.loops
        )
        result = run_bench(ep.base_url, plan.measure, options)
    assert lane.status() == {"localhost": "absent"} and local_env.processes() == []

    recs = result.records
    assert all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    dec = [r for r in recs if r.phase == "decode"]
    assert {r.output_tokens_source for r in dec} == {"chunk_count"}  # no usage in llama.cpp streams
    assert all(r.output_tokens == 64 and r.chunks == 64 for r in dec)
    assert "chunk_count" in result.summary.method["decode_c1"]
    # c2: the engine serialises; labkit must say so and not report an aggregate.
    c2 = [g for g in result.groups if g.concurrency == 2]
    assert c2 and all(g.serialised for g in c2)
    assert "decode_c2_agg" not in result.summary.measures
    assert any("serialised" in n for n in result.summary.notes)
    # ... and the engine ran one stream at a time: the c2 window is marked short (client timing: no /metrics)
    assert all(g.effective_concurrency < 1.1 and g.concurrency_source == "client timing" for g in c2)
    assert ("short-concurrency", "decode_c2") in {(f["code"], f["window"]) for f in result.summary.flags}
    # Prefill at 4K and 12.6K (fits n_ctx 16384): prompt lengths from the server's tokenizer, since
    # streams carry no usage; the source says so.
    pre = [r for r in recs if r.phase == "prefill"]
    assert sorted(r.prompt_target for r in pre) == [4096, 12600]
    assert all(abs(r.prompt_tokens - r.prompt_target) <= 0.01 * r.prompt_target for r in pre)
    assert {r.prompt_tokens_source for r in pre} == {"tokenize"}
    assert "/extras/tokenize/count" in result.provenance["prompt_length_counter"]
    assert result.summary.measures["prefill_4096"] > 0 and result.summary.measures["prefill_12600"] > 0
    assert result.summary.measures["decode_c1"] > 0

    # Stored like any lane, the run shows up in the report tables with its boot facts.
    from labkit import report
    from labkit.store import ResultsStore, load_results

    with ResultsStore(tmp_path / "results").new_run(plan, provenance=result.provenance) as run:
        run.write_requests(result.records)
        run.finish(result.summary, boot=ep.boot.to_dict())
    data = load_results(tmp_path / "results")
    got = set(data.measures["measure"])
    assert {"decode_c1", "prefill_4096", "prefill_12600"} <= got and "decode_c2_agg" not in got
    assert len(data.requests()) == len(recs)
    md = report.generate(tmp_path / "results", write=False, plots=False).markdown
    assert plan.label in md


def test_overlong_prompt_is_a_failed_record_with_a_reason(tmp_path, cache, local_env):
    """A prompt over n_ctx: llama-cpp-python answers 200 with an empty body; labkit must not count it."""
    plan = tiny_plan(free_port(), prompt_tokens=(17000,), repeats=1, warmup=0)
    lane = Lane(plan, sink=RunFolderSink(tmp_path / "run"), poll=0.1, stop_grace=5)
    with lane.up() as ep:
        result = run_bench(
            ep.base_url, plan.measure, BenchOptions(model=ep.model, progress=False, decode=False)
        )
    (rec,) = [r for r in result.records if r.phase == "prefill"]
    assert rec.prompt_target == 17000 and not rec.ok and rec.http_status == 200
    assert rec.error.startswith("empty stream: HTTP 200 with no SSE events"), rec.error
    assert rec.prefill_tps is None and rec.t_first is None
    assert "prefill_17000" not in result.summary.measures and result.summary.n_failed == 1
    assert "empty stream" in " ".join(result.summary.notes)


def test_server_killed_mid_stream_gives_failed_records_not_numbers(tmp_path, cache, local_env):
    # 8000 tokens take seconds even on a fast CPU: the kill lands inside the first (cold) stream.
    plan = tiny_plan(free_port(), concurrency=(1,), turns=3, output_tokens=8000, warmup=0, timeout=30.0)
    lane = Lane(plan, sink=RunFolderSink(tmp_path / "run"), poll=0.1, stop_grace=5)
    ep = lane.start()
    try:
        pid_file = Path(os.environ["LABKIT_STATE_DIR"]) / "lanes" / plan.lane_id / "localhost.pid"
        pid = int(pid_file.read_text())  # the engine's own pid (the runtime execs it)
        killer = threading.Timer(1.5, os.kill, (pid, signal.SIGKILL))
        killer.start()
        result = run_bench(
            ep.base_url, plan.measure, BenchOptions(model=ep.model, progress=False, prefill=False)
        )
        killer.join()
    finally:
        lane.down()
    recs = result.records
    assert len(recs) == 4 and not any(r.ok for r in recs)
    cut = recs[0]  # the stream the kill interrupted: some tokens, HTTP 200, but no finish
    assert cut.cold and cut.http_status == 200 and 0 < cut.output_tokens < 8000 and cut.finish_reason is None
    assert cut.error and cut.decode_tps is None
    assert all(r.error and r.decode_tps is None for r in recs[1:])  # refused connections afterwards
    assert result.summary.n_failed == 4 and result.summary.n_ok == 0
    assert not any(k.startswith("decode") for k in result.summary.measures)
    assert any("4 failed request(s) excluded" in n for n in result.summary.notes)


def test_bench_notebook_runs_the_lane_end_to_end(tmp_path, cache, monkeypatch):
    """Issue 8's flow: `labkit run bench -p recipe tiny-llamacpp` boots, measures, tears down, stores the
    run, and the comparison table shows the lane (the recipe's own plan and port)."""
    import subprocess
    import sys

    from labkit import report
    from labkit.store import load_results

    env = {**os.environ, "LABKIT_CACHE": str(cache), "LABKIT_STATE_DIR": str(tmp_path / "state")}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "labkit",
            "run",
            "bench",
            "-p",
            "recipe",
            "tiny-llamacpp",
            "-p",
            "results",
            str(tmp_path / "results"),
            "-o",
            str(tmp_path / "out.ipynb"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = load_results(tmp_path / "results")
    (doc,) = data.docs.values()
    assert doc.status == "complete" and doc.recipe == "tiny-llamacpp"
    assert doc.boot.raw["kv_pool_tokens"] == 16384 and doc.boot.raw["kv_pool_context"] == 16384
    m = doc.summary.measures
    assert {"decode_c1", "decode_c1_cold", "prefill_4096", "prefill_12600", "kv_pool_tokens"} <= set(m)
    assert "decode_c2_agg" not in m and any("serialised" in n for n in doc.summary.raw["notes"])
    assert "chunk_count" in doc.summary.method["decode_c1"]
    md = report.generate(tmp_path / "results", write=False, plots=False).markdown
    assert "llama.cpp tiny CPU" in md
    monkeypatch.setenv("LABKIT_STATE_DIR", str(tmp_path / "state"))
    assert Lane(load_plan("tiny-llamacpp"), progress=None).status() == {"localhost": "absent"}  # torn down
