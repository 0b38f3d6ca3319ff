"""`labkit export RUN --format vllm-bench --level c4|2/s`: a load level of a labkit run, written through the store
with its load measures computed by labkit's own summary, exported as vllm bench serve writes a run at that level
(a closed level as max_concurrency N at an infinite rate, an open one as request_rate R) and imported back
through the real import path: the figures both definitions share match the run's own, those they do not
(E2EL: vLLM's ends at the last chunk, labkit's with the stream) differ by just that; an absent level is refused
naming the run and the levels it has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.cli.app import main
from labkit.exchange import export_run, import_file
from labkit.exchange.export import ExportError, parse_level
from labkit.measure import RunSummary
from labkit.measure.records import RequestRecord
from labkit.measure.summary.load import load_measures
from labkit.measures import measure_key
from labkit.recipe import LoadPlan
from labkit.report.gate import about_rows
from labkit.store import ResultsStore, read_run
from tests.support.results import sim_plan

MS = 1_000_000
TAIL = 2 * MS  # the usage chunk and [DONE] after the last token: inside labkit's E2EL, not vLLM's latency


def _request(run_id: str, loop: str, level: float, i: int, t_send: int, ok: bool = True) -> RequestRecord:
    """One load request: TTFT and chunk gaps that vary with i, 8 one-token chunks."""
    t_first = t_send + (40 + 7 * (i % 5)) * MS
    chunks = [t_first + k * (5 + i % 3) * MS for k in range(8)]
    return RequestRecord(
        run_id=run_id,
        lane="sim",
        phase="load",
        load_loop=loop,  # type: ignore[arg-type]
        load_level=level,
        prompt_tokens=100 + i,
        prompt_tokens_source="usage",
        output_tokens=8 if ok else None,
        output_tokens_source="final_usage",
        chunks=8 if ok else 0,
        t_send=t_send,
        t_chunk1=t_first if ok else None,
        t_first=t_first if ok else None,
        t_last=chunks[-1] if ok else None,
        t_end=chunks[-1] + TAIL if ok else t_send + 30 * MS,
        chunk_t=chunks if ok else [],
        chunk_n=[1] * 8 if ok else [],
        ok=ok,
        error="" if ok else "http 500",
    )


def _load_run(root: Path) -> str:
    """A labkit run with a closed level of 4 streams and an open level at 2 requests/s (one request failed),
    its load measures computed by labkit's own summary, written through the store."""
    store = ResultsStore(root)
    with store.new_run(sim_plan()) as run:
        rid = run.run_id
        records = [_request(rid, "closed", 4.0, i, (i // 4) * 120 * MS + i * MS) for i in range(12)]
        records += [_request(rid, "open", 2.0, i, 2_000 * MS + i * 500 * MS) for i in range(10)]
        records.append(_request(rid, "open", 2.0, 10, 7_000 * MS, ok=False))
        summary = RunSummary(measures={}, n_ok=22, n_failed=1)
        load_measures(summary, records, LoadPlan(rate=(2.0,)), None)
        run.write_requests(records)
        run.finish(summary, boot={}, provenance={"harness": "test"})
    return rid


@pytest.mark.parametrize(("level", "axis", "value"), [("2/s", "rate", 2.0), ("c4", "load", 4)])
def test_a_level_exported_and_imported_back_has_the_runs_own_figures(tmp_path, level, axis, value):
    root = tmp_path / "results"
    rid = _load_run(root)
    own = read_run(next(root.rglob(rid))).summary.measures
    doc = export_run(rid, "vllm-bench", results=root, level=level)
    if axis == "rate":
        assert (doc["request_rate"], doc["max_concurrency"], doc["burstiness"]) == (2.0, None, 1.0)
        assert (doc["completed"], doc["failed"], doc["num_prompts"]) == (10, 1, 11)
    else:
        assert (doc["request_rate"], doc["max_concurrency"]) == ("inf", 4)
        assert doc["completed"] == 12 and len(doc["ttfts"]) == len(doc["itls"]) == 12
    path = tmp_path / "export.json"
    path.write_text(json.dumps(doc))
    [outcome] = import_file(path, lane="exported", results=root)
    back = read_run(outcome.path)
    assert back.plan.imported is not None and back.plan.imported.setting.get("rate") == (
        "2" if axis == "rate" else "inf"
    )
    rows = about_rows(back)
    for family, stat in (
        ("load_ttft", "p50"),
        ("load_ttft", "p99"),
        ("load_tpot", "p50"),
        ("load_itl", "p99"),
    ):
        key = measure_key(family, **{axis: value}, stat=stat)
        assert rows[key][1].converted == pytest.approx(own[key], rel=1e-9), key
        assert rows[key][1].definition and rows[key][1].definition.endswith("@labkit-export")
    for family in ("load_output_tps", "load_request_rate"):
        key = measure_key(family, **{axis: value})
        assert rows[key][1].converted == pytest.approx(own[key], rel=1e-9), key
    e2el = measure_key("load_e2el", **{axis: value}, stat="p50")
    assert rows[e2el][1].converted == pytest.approx(own[e2el] - TAIL / 1e9, rel=1e-9)


def test_an_absent_level_is_refused_naming_the_run_and_its_levels(tmp_path):
    root = tmp_path / "results"
    rid = _load_run(root)
    with pytest.raises(
        ExportError, match=rf"run {rid} has no answered load requests at c8; its levels: c4, 2/s"
    ):
        export_run(rid, "vllm-bench", results=root, level="c8")
    with pytest.raises(ExportError, match="--level 'fast'"):
        parse_level("fast")
    with pytest.raises(ExportError, match="only the vllm-bench format"):
        export_run(rid, "llama-benchy", results=root, level="c4")


def test_the_cli_writes_a_level(tmp_path):
    root = tmp_path / "results"
    rid = _load_run(root)
    out = tmp_path / "c4.json"
    argv = ["export", rid, "--format", "vllm-bench", "--level", "c4", "--results", str(root), "-o", str(out)]
    assert main(argv) == 0
    written = json.loads(out.read_text())
    assert written["max_concurrency"] == 4 and written["labkit_level"] == "c4"
