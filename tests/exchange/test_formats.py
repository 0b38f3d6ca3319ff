"""Every format labkit reads, from a real file each tool wrote against the real vLLM CPU server here
(tests/support/fixtures/imports/README.md has the commands): recognised by its keys, its figures read at the
place the tool wrote them, its version and setting as the file gives them, the labkit measure each speaks of
converted by its definition; and each format's own way of being wrong refused."""

from __future__ import annotations

import json

import pytest

from labkit.exchange import import_file
from labkit.exchange.importing import read_file
from labkit.exchange.jsonfile import ImportFileError
from labkit.store import read_run
from tests.support.imports import IMPORTS, edited

CASES = {
    "vllm-bench-c1.json": ("vllm-bench", "unknown", 1),
    "llama-benchy.json": ("llama-benchy", "0.4.0", 2),
    "guidellm.json": ("guidellm", "0.8.1", 1),
    "aiperf-profile_export_aiperf.json": ("aiperf", "0.13.0", 1),
    "sglang-bench.jsonl": ("sglang-bench", "unknown", 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_real_file_is_recognised_and_speaks_of_decode_and_ttft_at_c1(name, tmp_path):
    fmt, version, results = CASES[name]
    found, _ = read_file(IMPORTS / name)
    assert [(i.format, i.tool_version) for i in found] == [(fmt, version)] * results
    outcomes = import_file(IMPORTS / name, results=tmp_path)
    c1 = next(o for o in outcomes if o.imported.setting.concurrency == 1)
    info = read_run(c1.path).measure_info
    about = {row.about: row for row in info.values() if row.about}
    assert {"decode_c1", "ttft_c1"} <= set(about), sorted(about)
    # the tiny model on 2 cores: hundreds of tokens per second, TTFT in milliseconds, by every tool
    assert 100 < (about["decode_c1"].converted or 0) < 5000
    assert 0.0005 < (about["ttft_c1"].converted or 0) < 0.5
    assert all(row.raw["exact"] is False for row in about.values())


def test_guidellm_figures_are_its_successful_distributions():
    [imp], _ = read_file(IMPORTS / "guidellm.json")
    doc = json.loads((IMPORTS / "guidellm.json").read_text())["benchmarks"][0]["metrics"]
    itl = doc["inter_token_latency_ms"]["successful"]
    assert imp.figures["inter_token_latency_ms.mean"] == itl["mean"]
    assert imp.figures["inter_token_latency_ms.p99"] == itl["percentiles"]["p99"]
    assert imp.figures["request_totals.successful"] == 6 and imp.setting.concurrency == 1


def test_llama_benchy_rows_are_results_and_std_is_kept_beside_the_mean():
    found, _ = read_file(IMPORTS / "llama-benchy.json")
    doc = json.loads((IMPORTS / "llama-benchy.json").read_text())
    for imp, row in zip(found, doc["benchmarks"], strict=True):
        assert imp.setting.concurrency == row["concurrency"] and imp.setting.prompt_tokens == 128
        assert imp.figures["tg_throughput"] == row["tg_throughput"]["mean"]
        assert imp.figures["tg_throughput_std"] == row["tg_throughput"]["std"]
    assert found[0].provenance["latency_mode"] == "api"


def test_aiperf_setting_comes_from_its_input_config_and_other_metrics_stay_unread():
    [imp], _ = read_file(IMPORTS / "aiperf-profile_export_aiperf.json")
    assert (imp.setting.concurrency, imp.setting.prompt_tokens, imp.setting.output_tokens) == (1, 128, 32)
    assert "http_req_waiting" in imp.unread and "time_to_first_token.p50" in imp.figures


def test_sglangs_infinite_request_rate_is_read_and_any_other_infinity_refused(tmp_path):
    [imp], _ = read_file(IMPORTS / "sglang-bench.jsonl")
    assert imp.setting.rate == "inf" and "Infinity" in (IMPORTS / "sglang-bench.jsonl").read_text()
    bad = tmp_path / "inf.jsonl"
    bad.write_text(
        (IMPORTS / "sglang-bench.jsonl")
        .read_text()
        .replace('"mean_ttft_ms": ', '"mean_ttft_ms": Infinity, "x": ')
    )
    with pytest.raises(ImportFileError, match="key 'mean_ttft_ms' is NaN or Infinity"):
        read_file(bad)


def test_an_aiperf_metric_in_another_unit_is_refused(tmp_path):
    doc = json.loads((IMPORTS / "aiperf-profile_export_aiperf.json").read_text())
    doc["time_to_first_token"]["unit"] = "sec"
    bad = tmp_path / "unit.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ImportFileError, match="key 'time_to_first_token.unit' is 'sec'.*'ms'"):
        read_file(bad)


def test_versions_whose_definitions_differ_are_refused(tmp_path):
    old = edited(IMPORTS / "llama-benchy.json", tmp_path / "old.json", {"version": "0.3.0"})
    with pytest.raises(ImportFileError, match="labkit reads llama-benchy 0.4 files"):
        read_file(old)
    doc = json.loads((IMPORTS / "guidellm.json").read_text())
    doc["metadata"]["version"] = 1
    bad = tmp_path / "schema1.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(
        ImportFileError, match="key 'metadata.version' is 1: labkit reads guidellm's report schema 2"
    ):
        read_file(bad)


def test_an_unknown_key_inside_a_guidellm_benchmark_is_refused(tmp_path):
    doc = json.loads((IMPORTS / "guidellm.json").read_text())
    doc["benchmarks"][0]["gpu_joules"] = 5
    bad = tmp_path / "joules.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(
        ImportFileError, match="key 'benchmarks\\[0\\].gpu_joules' is not one guidellm writes"
    ):
        read_file(bad)
