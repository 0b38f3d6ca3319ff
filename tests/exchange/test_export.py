"""`labkit export`: a stored labkit run (the simulator lane of results/, copied) written as `vllm bench serve` and
llama-benchy files, each figure computed by the tool's definition from labkit's stamps. Checked three ways:
against labkit's own per-request figures where the definitions meet, by labkit's importer, and by the tools'
own readers (`vllm bench sweep plot`, llama-benchy's pydantic report model) where they are installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.cli.app import main
from labkit.exchange import export_run, import_file
from labkit.exchange.export import ExportError
from labkit.exchange.run_export import request_rows
from labkit.store import read_run
from tests.support.imports import IMPORTS
from tests.support.results import stored_run
from tests.support.tool_files import tools_root
from tests.support.vllm import vllm_available, vllm_executable


@pytest.fixture
def run(tmp_path, committed_record) -> tuple[Path, str]:
    """(results root, run id) of one stored sim run with decode c1, c2 and prefill requests."""
    root = tmp_path / "results"
    lane = committed_record / "sim" / "spec-none"
    src = sorted(p for p in lane.iterdir() if (p / "requests.csv").is_file())[-1]
    shutil.copytree(src, root / "sim" / "spec-none" / src.name)
    return root, src.name


def test_vllm_bench_export_applies_vllms_definitions_to_labkits_stamps(run):
    root, rid = run
    doc = export_run(rid, "vllm-bench", results=root)
    rows = [r for r in request_rows(root / "sim" / "spec-none" / rid) if r["phase"] == "decode"]
    warm = [r for r in rows if r["concurrency"] == 1 and str(r["cold"]) == "False"]
    assert doc["num_prompts"] == doc["completed"] == len(warm) and doc["max_concurrency"] == 1
    assert doc["output_lens"] == [int(r["output_tokens"]) for r in warm]
    # where labkit's first arrival is the first chunk and holds one token, vLLM's TPOT is labkit's decode
    same = [(i, r) for i, r in enumerate(warm) if r["t_first"] == r["t_chunk1"] and int(r["n_first"]) == 1]
    assert same
    for i, r in same:
        tpot = (doc["latencies"][i] - doc["ttfts"][i]) / (doc["output_lens"][i] - 1)
        assert 1 / tpot == pytest.approx(float(r["decode_tps"]), rel=1e-9)
    assert doc["labkit_run_id"] == rid and doc["label"] == f"labkit {rid}"


def test_the_vllm_bench_export_imports_back_as_a_vllm_bench_file(run, tmp_path):
    root, rid = run
    out = tmp_path / "export.json"
    assert main(["export", rid, "--format", "vllm-bench", "--results", str(root), "-o", str(out)]) == 0
    [back] = import_file(out, results=tmp_path / "back")
    assert (
        back.imported.format == "vllm-bench" and back.imported.provenance["metadata"]["labkit_run_id"] == rid
    )
    assert back.imported.figures["median_tpot_ms"] == json.loads(out.read_text())["median_tpot_ms"]


def test_the_llama_benchy_export_has_a_row_per_concurrency_and_prompt_length(run, tmp_path):
    root, rid = run
    doc = export_run(rid, "llama-benchy", results=root)
    assert doc["version"].startswith("labkit-") and doc["latency_mode"] == "none"
    rows = {(r["concurrency"], r["response_size"]): r for r in doc["benchmarks"]}
    summary = read_run(root / "sim" / "spec-none" / rid).summary.measures
    c1 = rows[(1, 64)]
    # llama-benchy's c1 decode is labkit's per-request formula, averaged: near the median decode_c1
    assert c1["tg_throughput"]["mean"] == pytest.approx(summary["decode_c1"], rel=0.02)
    assert rows[(2, 64)]["tg_throughput"]["mean"] > c1["tg_throughput"]["mean"]  # c2 totals over a batch
    prefill = sorted(r["prompt_size"] for r in doc["benchmarks"] if r["response_size"] == 1)
    assert prefill == [4096, 12600]
    out = tmp_path / "benchy.json"
    out.write_text(json.dumps(doc))
    imported = import_file(out, results=tmp_path / "back")
    assert {o.imported.tool for o in imported} == {"labkit export (llama-benchy format)"}


def test_an_imported_run_an_unknown_run_and_an_unknown_format_are_refused(run, tmp_path):
    root, rid = run
    [imp] = import_file(IMPORTS / "vllm-bench-c1.json", results=root)
    with pytest.raises(ExportError, match="imported, not measured by labkit"):
        export_run(imp.run_id, "vllm-bench", results=root)
    with pytest.raises(ExportError, match=f"no complete run 'nope'.*{rid}"):
        export_run("nope", "vllm-bench", results=root)
    with pytest.raises(ExportError, match="labkit writes vllm-bench, llama-benchy"):
        export_run(rid, "guidellm", results=root)
    with pytest.raises(ExportError, match="no answered decode requests at concurrency 8"):
        export_run(rid, "vllm-bench", results=root, concurrency=8)


@pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")
def test_vllms_own_sweep_plot_reads_the_export(run, tmp_path):
    """`vllm bench sweep plot` reads result files as its sweeps store them (summary.json: a list of runs) and
    plots one field against another: the c1 and c2 exports, median TPOT over max_concurrency."""
    pytest.importorskip("seaborn", reason="vllm bench sweep plot needs seaborn (the vllm extra installs it)")
    root, rid = run
    for c in (1, 2):
        folder = tmp_path / "sweep" / f"c{c}"
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps([export_run(rid, "vllm-bench", root, concurrency=c)]))
    argv = [str(vllm_executable()), "bench", "sweep", "plot", str(tmp_path / "sweep")]
    r = subprocess.run(
        [*argv, "--var-x", "max_concurrency", "--var-y", "median_tpot_ms"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (tmp_path / "sweep" / "FIGURE.png").stat().st_size > 0


BENCHY_PYTHON = tools_root() / "llama-benchy" / "bin" / "python"


@pytest.mark.skipif(
    not BENCHY_PYTHON.exists(), reason="llama-benchy is not installed (the test setup does it)"
)
def test_llama_benchys_own_report_model_reads_the_export_unchanged(run, tmp_path):
    root, rid = run
    out = tmp_path / "benchy.json"
    out.write_text(json.dumps(export_run(rid, "llama-benchy", results=root)))
    check = (
        "import json, sys; from llama_benchy.results import BenchmarkReport; "
        "doc = json.load(open(sys.argv[1])); report = BenchmarkReport.model_validate(doc); "
        "assert report.model_dump() == doc, 'fields differ'; print(len(report.benchmarks))"
    )
    r = subprocess.run(
        [str(BENCHY_PYTHON), "-c", check, str(out)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert int(r.stdout) == 4
    assert sys.executable != str(BENCHY_PYTHON)


def stamped(
    send: float, chunks: list[float], *, chunk1: float | None = None, first: float | None = None, **kw
):
    """One answered c1 decode request row as requests.csv holds it, times in seconds: `chunks` the token-bearing
    chunks' stamps (one token each), `chunk1` the first chunk (default: the first token-bearing one), `first`
    the first token (reasoning or content), `content` the first content token."""
    ns = 1_000_000_000
    chunk1 = chunks[0] if chunk1 is None else chunk1
    first = chunks[0] if first is None else first
    row = {
        "phase": "decode",
        "concurrency": 1,
        "ok": True,
        "cold": False,
        "group": None,
        "t_send": int(send * ns),
        "t_chunk1": int(chunk1 * ns),
        "t_first": int(first * ns),
        "t_content": int(kw.pop("content", first) * ns),
        "t_last": int(chunks[-1] * ns),
        "chunk_t": [int(t * ns) for t in chunks],
        "chunk_n": [1] * len(chunks),
        "output_tokens": len(chunks),
        "prompt_tokens": 100,
        "requested_tokens": len(chunks),
    }
    row.update(kw)
    return row


DOC = stored_run({"run_id": "r", "recipe": "x", "variant_id": "v", "started": "2026-12-05T10:00:00+00:00"})


def test_vllm_itls_have_no_gap_before_a_first_chunk_that_already_carries_a_token():
    token_first = stamped(0.0, [0.010, 0.012, 0.015])
    role_first = stamped(1.0, [1.011, 1.013], chunk1=1.010)
    doc = export_run_rows(DOC, [token_first, role_first])
    assert doc["itls"][0] == pytest.approx([0.002, 0.003])
    assert doc["itls"][1] == pytest.approx([0.001, 0.002])  # the role chunk, then each token: vLLM's gaps


def test_vllm_duration_is_the_time_the_turns_ran_not_the_scrapes_between_them():
    a = stamped(0.0, [0.010, 0.020])
    b = stamped(5.0, [5.010, 5.030])  # labkit scraped /metrics for seconds between the turns
    doc = export_run_rows(DOC, [a, b])
    assert doc["duration"] == pytest.approx(0.020 + 0.030)
    assert doc["request_throughput"] == pytest.approx(2 / 0.050)


def test_llama_benchy_e2e_ttft_ends_at_the_first_token_reasoning_included():
    from labkit.exchange.export import benchy_row

    thinking = stamped(0.0, [0.010, 0.020, 0.030], first=0.010, content=0.025)
    row = benchy_row([thinking], 1, 100, 3)
    assert row["e2e_ttft"]["mean"] == pytest.approx(10.0)


def export_run_rows(doc, rows):
    from labkit.exchange.export import vllm_bench

    return vllm_bench(doc, rows, 1)


@pytest.mark.parametrize(
    "fmt, real", [("llama-benchy", "llama-benchy.json"), ("vllm-bench", "vllm-bench-c1.json")]
)
def test_an_export_imported_back_is_never_taken_for_the_tools_own_measurement(run, tmp_path, fmt, real):
    """The export applies the tool's definitions to labkit's stamps: its figures get definition ids of their
    own, so the gate refuses it beside the tool's real file as it refuses two tools."""
    from labkit.lab import compare

    root, rid = run
    out = tmp_path / "export.json"
    out.write_text(json.dumps(export_run(rid, fmt, results=root)))
    back = next(
        o
        for o in import_file(out, lane="exported", results=tmp_path / "r")
        if o.imported.setting.concurrency == 1
    )
    assert back.imported.tool.startswith("labkit export") and back.imported.tool_version != "unknown"
    info = read_run(back.path).measure_info
    decode = next(row for row in info.values() if row.about == "decode_c1")
    assert str(decode.definition).endswith("@labkit-export")
    tool = next(
        o
        for o in import_file(IMPORTS / real, lane="tool", results=tmp_path / "r")
        if o.imported.setting.concurrency == 1
    )
    lanes = [f"{o.path.parent.parent.name}/{o.path.parent.name}" for o in (back, tool)]
    c = compare(*lanes, results=tmp_path / "r", force=True, measures=["decode_c1"])
    assert "definition of decode_c1" in c.gate.blocked
