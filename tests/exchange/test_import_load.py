"""Imports of rate-paced and concurrency-bound results speak of labkit's load measures at their level: the
recorded files of each tool (tests/support/fixtures/imports/), edited into the setting under test, go through
the real import path into a temp results folder; each percentile the file has becomes the labkit load measure
of its level (median as p50, a mean none), converted into its unit with how the tool's figure differs, and the
figures the import stored before stay as they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit.exchange import import_file
from labkit.exchange.definitions import definition, level_of, load_docs_table
from labkit.exchange.model import Setting
from labkit.measures import measure_key
from labkit.report.gate import about_rows
from labkit.store import StoredRun, read_run
from tests.support.imports import IMPORTS, edited
from tools.docgen import section

DOC = Path(__file__).resolve().parents[2] / "docs" / "imports.md"


def _import_one(path: Path, results: Path) -> StoredRun:
    [outcome] = import_file(path, lane="load-import", results=results)
    return read_run(outcome.path)


def _rate_file(tmp_path: Path, **change: object) -> Path:
    """The recorded c1 vllm bench file as if run with --request-rate 2 (no cap) and --percentile-metrics
    saving p90, with a goodput."""
    base = json.loads((IMPORTS / "vllm-bench-c1.json").read_text())
    extra = {"request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None, "request_goodput": 9.5}
    extra["p90_ttft_ms"] = base["p99_ttft_ms"] * 0.9
    return edited(IMPORTS / "vllm-bench-c1.json", tmp_path / "vllm-rate.json", {**extra, **change})


def test_a_rate_paced_vllm_file_speaks_of_the_load_measures_at_its_rate(tmp_path):
    path = _rate_file(tmp_path)
    doc = json.loads(path.read_text())
    run = _import_one(path, tmp_path / "results")
    rows = about_rows(run)
    at = {"rate": 2.0}
    for stat, field in (("p50", "median_ttft_ms"), ("p90", "p90_ttft_ms"), ("p99", "p99_ttft_ms")):
        key, row = rows[measure_key("load_ttft", **at, stat=stat)]
        assert row.converted == pytest.approx(doc[field] / 1000)
        assert row.definition == key and key.startswith("vllm-bench:") and key.endswith("_ttft_ms")
    assert rows[measure_key("load_tpot", **at, stat="p50")][1].converted == pytest.approx(
        doc["median_tpot_ms"] / 1000
    )
    assert rows[measure_key("load_itl", **at, stat="p99")][1].converted == pytest.approx(
        doc["p99_itl_ms"] / 1000
    )
    assert rows[measure_key("load_e2el", **at, stat="p99")][1].converted == pytest.approx(
        doc["p99_e2el_ms"] / 1000
    )
    assert rows[measure_key("load_output_tps", **at)][1].converted == doc["output_throughput"]
    assert rows[measure_key("load_request_rate", **at)][1].converted == doc["request_throughput"]
    assert rows[measure_key("load_goodput", **at)][1].converted == doc["request_goodput"]
    # a mean is no labkit statistic, and a rate's figures speak of no c<N> measure
    assert not any("stat=mean" in k for k in rows) and "ttft_c1" not in rows and "decode_c1" not in rows
    # the definition says how vLLM's TTFT differs: the role prelude counts
    ttft = run.measure_info["vllm-bench:median_ttft_ms"]
    assert ttft.load_differs and "role" in ttft.load_differs
    # every figure is still stored under its own name, in ms, and no load key is stored as labkit's own
    assert run.summary.measures["vllm-bench:median_ttft_ms"] == doc["median_ttft_ms"]
    assert not any(k.startswith("load_") for k in run.summary.measures)


def test_a_concurrency_bound_vllm_file_speaks_of_its_streams_and_keeps_its_c1_measures(tmp_path):
    c1 = _import_one(IMPORTS / "vllm-bench-c1.json", tmp_path / "results")
    rows = about_rows(c1)
    assert rows["ttft_c1"][0] == "vllm-bench:median_ttft_ms"  # the existing c1 measure, as it was
    assert rows["decode_c1"][1].converted == pytest.approx(
        1000 / c1.summary.measures["vllm-bench:median_tpot_ms"]
    )
    key, row = rows[measure_key("load_ttft", load=1, stat="p50")]
    assert key == "vllm-bench:median_ttft_ms" and row.exact is False  # the first of median and p50
    assert row.converted == pytest.approx(c1.summary.measures[key] / 1000)
    c2 = _import_one(IMPORTS / "vllm-bench-c2.json", tmp_path / "results")
    assert measure_key("load_tpot", load=2, stat="p99") in about_rows(c2)
    assert not any("load=1" in k for k in about_rows(c2))


def test_all_at_once_without_a_cap_is_no_labkit_level(tmp_path):
    path = _rate_file(tmp_path, request_rate="inf", max_concurrency=None)
    run = _import_one(path, tmp_path / "results")
    assert not any(k.startswith("load_") for k in about_rows(run))
    assert level_of(Setting(concurrency=4, rate="inf")) == ("load", 4)
    assert level_of(Setting(concurrency=4, depth=4096)) is None


def test_a_guidellm_constant_rate_and_a_concurrent_strategy(tmp_path):
    doc = json.loads((IMPORTS / "guidellm.json").read_text())
    bench = doc["benchmarks"][0]
    bench["config"]["strategy"] = {
        "type_": "constant",
        "rate": 1.5,
        "worker_count": 1,
        "max_concurrency": None,
    }
    path = tmp_path / "guidellm-rate.json"
    path.write_text(json.dumps(doc))
    run = _import_one(path, tmp_path / "results")
    rows = about_rows(run)
    ttft = bench["metrics"]["time_to_first_token_ms"]["successful"]
    key, row = rows[measure_key("load_ttft", rate=1.5, stat="p50")]
    assert key == "guidellm:time_to_first_token_ms.median"
    assert row.converted == pytest.approx(ttft["median"] / 1000)
    assert rows[measure_key("load_ttft", rate=1.5, stat="p99")][1].converted == pytest.approx(
        ttft["percentiles"]["p99"] / 1000
    )
    out = bench["metrics"]["output_tokens_per_second"]["successful"]["mean"]
    assert rows[measure_key("load_output_tps", rate=1.5)][1].converted == pytest.approx(out)
    assert "nearest-rank" in (row.load_differs or "")
    bench["config"]["strategy"] = {
        "type_": "concurrent",
        "streams": 4,
        "worker_count": 1,
        "max_concurrency": 4,
    }
    path.write_text(json.dumps(doc))
    run = _import_one(path, tmp_path / "results")
    assert measure_key("load_e2el", load=4, stat="p99") in about_rows(run)


def test_an_aiperf_concurrency_file_and_its_request_rate_mode(tmp_path):
    run = _import_one(IMPORTS / "aiperf-profile_export_aiperf.json", tmp_path / "results")
    rows = about_rows(run)
    key, row = rows[measure_key("load_ttft", load=1, stat="p99")]
    assert key == "aiperf:time_to_first_token.p99"
    assert row.converted == pytest.approx(run.summary.measures[key] / 1000)
    assert row.definition == key  # aiperf counted with the server's usage here: no branch suffix
    doc = json.loads((IMPORTS / "aiperf-profile_export_aiperf.json").read_text())
    doc["input_config"]["phases"][0] |= {"type": "request_rate", "request_rate": 3.0, "concurrency": None}
    path = tmp_path / "aiperf-rate.json"
    path.write_text(json.dumps(doc))
    rows = about_rows(_import_one(path, tmp_path / "results2"))
    assert measure_key("load_request_rate", rate=3.0) in rows
    assert not any("load=" in k for k in rows)


def test_an_sglang_line_at_a_rate(tmp_path):
    line = (
        (IMPORTS / "sglang-bench.jsonl")
        .read_text()
        .strip()
        .replace('"request_rate": Infinity', '"request_rate": 4')
    )
    assert '"request_rate": 4' in line
    path = tmp_path / "sglang-rate.jsonl"
    path.write_text(line + "\n")
    run = _import_one(path, tmp_path / "results")
    rows = about_rows(run)
    key, row = rows[measure_key("load_ttft", rate=4.0, stat="p99")]
    assert key == "sglang-bench:p99_ttft_ms" and row.converted == pytest.approx(
        run.summary.measures[key] / 1000
    )
    assert rows[measure_key("load_output_tps", rate=4.0)][0] == "sglang-bench:output_throughput"


def test_only_percentiles_labkit_keeps_become_load_measures():
    d = definition("vllm-bench", "p99.9_ttft_ms")
    assert d is not None
    assert d.load_key("p99.9_ttft_ms", Setting(rate="2")) is None
    assert d.load_key("p95_ttft_ms", Setting(rate="2")) == measure_key("load_ttft", rate=2.0, stat="p95")
    mean = definition("vllm-bench", "mean_ttft_ms")
    assert mean is not None and mean.load_key("mean_ttft_ms", Setting(rate="2")) is None


def test_docs_imports_md_carries_the_load_table_as_the_code_reads_it():
    assert section(DOC.read_text(), "load-definitions") == load_docs_table(), (
        "docs/imports.md's load table drifted from labkit/exchange/definitions.toml: run tools/imports_doc.py"
    )


def test_an_imported_rate_file_stands_beside_a_labkit_load_run_of_that_rate(tmp_path):
    from labkit.report.specs import RowSpec, TableSpec
    from labkit.report.tools_table import IMPORTED_MARK, tools_table
    from labkit.store import load_results
    from tests.exchange.test_export_load import _load_run

    root = tmp_path / "results"
    rid = _load_run(root)  # closed c4 and open 2/s
    path = _rate_file(tmp_path)
    doc = json.loads(path.read_text())
    import_file(path, recipe="sim", results=root)
    rows = (
        RowSpec("TTFT p50 (s)", measure="load_ttft@stat=p50", decimals=4),
        RowSpec("TTFT p99 (s)", measure="load_ttft@stat=p99", decimals=4),
        RowSpec("TPOT p50 (s)", measure="load_tpot@stat=p50", decimals=4),
        RowSpec("output (t/s)", measure="load_output_tps", decimals=1),
    )
    spec = TableSpec(id="tools-load", title="t", columns=None, rows=rows, axis="tools")
    docs = load_results(root).docs
    table = tools_table(spec, docs)
    frame = table.frame
    at_rate = frame[frame["level"] == "2/s"]
    assert len(at_rate) == 2  # labkit's level and the file, side by side
    labkit_row = at_rate[at_rate["source"].str.startswith("labkit")].iloc[0]
    file_row = at_rate[at_rate["source"].str.endswith(IMPORTED_MARK)].iloc[0]
    own = docs[rid].summary.measures[measure_key("load_ttft", rate=2.0, stat="p99")]
    assert labkit_row["TTFT p99 (s)"] == f"{own:,.4f}"
    assert file_row["TTFT p99 (s)"] == f"{doc['p99_ttft_ms'] / 1000:,.4f}"
    assert file_row["output (t/s)"] == f"{doc['output_throughput']:,.1f}"
    assert "vllm-bench:p99_ttft_ms" in file_row["TTFT p99 (s): definition"]
    assert labkit_row["TTFT p99 (s): definition"].endswith("labkit:load_ttft@rate=2@stat=p99")
    [note] = [n for n in table.notes if "vllm-bench:median_ttft_ms" in n]
    assert "role" in note  # how vLLM's TTFT differs from labkit's
    assert list(frame["level"]).index("c4") < list(frame["level"]).index("2/s")  # closed levels first
    assert "c4" not in set(at_rate["level"]) and len(frame[frame["level"] == "c4"]) == 1  # the file ran no c4
