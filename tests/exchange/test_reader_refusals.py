"""Each reader's own refusals name the very key that is wrong, and what each file counts is what the stored run
says: a key the tool does not write is named (never a valid one beside it), SGLang's request rate takes only
Infinity, a llama-benchy row that measured nothing is refused, aiperf's model list in any shape, --extra-keys
reaching down into llama-benchy's metric objects, and the requests that ended well and not."""

from __future__ import annotations

import json

import pytest

from labkit.exchange import ReadOptions, import_file
from labkit.exchange.importing import read_file
from labkit.exchange.jsonfile import ImportFileError
from labkit.store import read_run
from tests.support.imports import IMPORTS, edited

AIPERF = IMPORTS / "aiperf-profile_export_aiperf.json"
SGLANG = IMPORTS / "sglang-bench.jsonl"
BENCHY = IMPORTS / "llama-benchy.json"


def sglang_line(tmp_path, change: dict, raw: tuple[str, str] | None = None):
    doc_text = SGLANG.read_text().strip()
    if raw:
        doc_text = doc_text.replace(*raw)
    path = tmp_path / "line.jsonl"
    if change:
        doc = json.loads(doc_text)
        doc.update(change)
        doc_text = json.dumps(doc)
    path.write_text(doc_text + "\n")
    return path


def test_an_unknown_aiperf_key_is_refused_by_its_own_name(tmp_path):
    bad = edited(AIPERF, tmp_path / "a.json", {"gpu_joules": 5})
    with pytest.raises(ImportFileError, match="key 'gpu_joules' is not one aiperf writes"):
        read_file(bad)


def test_an_unknown_sglang_key_is_refused_by_its_own_name(tmp_path):
    bad = sglang_line(tmp_path, {"gpu_joules": 5})
    with pytest.raises(ImportFileError, match="key 'gpu_joules' is not one sglang bench_serving writes"):
        read_file(bad)


def test_sglang_request_rate_is_infinity_or_a_number_never_nan(tmp_path):
    for bad in ("NaN", "-Infinity"):
        line = sglang_line(tmp_path, {}, raw=('"request_rate": Infinity', f'"request_rate": {bad}'))
        with pytest.raises(ImportFileError, match=f"key 'request_rate' is {bad}"):
            read_file(line)
    rated = sglang_line(tmp_path, {"request_rate": 4.0})
    [imp], _ = read_file(rated)
    assert imp.setting.rate == "4"


def test_a_llama_benchy_row_with_no_metric_is_refused_naming_the_row(tmp_path):
    doc = json.loads(BENCHY.read_text())
    doc["benchmarks"][1] = {k: v for k, v in doc["benchmarks"][1].items() if not isinstance(v, dict)}
    bad = tmp_path / "empty.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(ImportFileError, match="key 'benchmarks\\[1\\]' holds none of llama-benchy's metrics"):
        import_file(bad, results=tmp_path / "results")
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "models, name",
    [
        ({"items": [{"name": "tiny"}]}, "tiny"),
        (["tiny-a", "tiny-b"], "tiny-a"),
        ([{"name": "tiny-c"}], "tiny-c"),
        ("oops", "unknown"),
    ],
)
def test_aiperf_models_in_any_shape_give_the_model_or_unknown(tmp_path, models, name):
    doc = json.loads(AIPERF.read_text())
    doc["input_config"]["models"] = models
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    [imp], _ = read_file(path)
    assert imp.model == name


def test_extra_keys_reach_llama_benchys_metric_objects(tmp_path):
    doc = json.loads(BENCHY.read_text())
    doc["benchmarks"][0]["tg_throughput"]["median"] = 1.0
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ImportFileError, match="benchmarks\\[0\\].tg_throughput.median"):
        read_file(path)
    found, _ = read_file(path, options=ReadOptions(extra_keys=True))
    assert "benchmarks[0].tg_throughput.median" in found[0].unread


def test_aiperf_records_whose_token_counts_it_used(tmp_path):
    [imp], _ = read_file(AIPERF)
    assert imp.provenance["use_server_token_count"] is True


@pytest.mark.parametrize(
    "name, ok, failed",
    [
        ("vllm-bench-c1.json", 6, 0),
        ("guidellm.json", 6, 0),
        ("aiperf-profile_export_aiperf.json", 6, 0),
        ("sglang-bench.jsonl", 6, None),
        ("llama-benchy.json", 3, None),
    ],
)
def test_each_stored_run_counts_the_requests_its_file_counts(tmp_path, name, ok, failed):
    outcome = import_file(IMPORTS / name, results=tmp_path)[0]
    doc = read_run(outcome.path)
    assert doc.summary.n_ok == ok
    assert doc.provenance.raw["requests_failed"] == ("unknown" if failed is None else failed)
    if failed is None:
        assert "the file does not count failed requests" in doc.summary.raw["notes"]


def test_aiperf_failed_requests_come_from_its_error_summary(tmp_path):
    detail = {"code": 500, "type": "HTTPError", "message": "boom"}
    bad = edited(AIPERF, tmp_path / "e.json", {"error_summary": [{"error_details": detail, "count": 2}]})
    [imp], _ = read_file(bad)
    assert (imp.ok, imp.failed) == (6, 2)


@pytest.mark.parametrize(
    "where, key",
    [
        (("inter_token_latency_ms",), "cancelled"),
        (("inter_token_latency_ms", "successful"), "geomean"),
        (("inter_token_latency_ms", "successful", "percentiles"), "median"),
        (("request_totals",), "retried"),
    ],
)
def test_guidellms_statistics_are_checked_key_by_key(tmp_path, where, key):
    doc = json.loads((IMPORTS / "guidellm.json").read_text())
    obj = doc["benchmarks"][0]["metrics"]
    for part in where:
        obj = obj[part]
    obj[key] = 1.0
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    place = ".".join(("benchmarks[0].metrics", *where, key)).replace("[", "\\[").replace("]", "\\]")
    with pytest.raises(ImportFileError, match=f"key '{place}' is not one guidellm writes"):
        read_file(path)
    [kept], _ = read_file(path, options=ReadOptions(extra_keys=True))
    assert ".".join(("benchmarks[0].metrics", *where, key)) in kept.unread  # listed, never dropped silently


def test_an_unknown_aiperf_statistic_is_refused_or_listed_unread(tmp_path):
    doc = json.loads(AIPERF.read_text())
    doc["time_to_first_token"]["geomean"] = 9.0
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ImportFileError, match="key 'time_to_first_token.geomean' is not one aiperf writes"):
        read_file(path)
    [kept], _ = read_file(path, options=ReadOptions(extra_keys=True))
    assert "time_to_first_token.geomean" in kept.unread


@pytest.mark.parametrize("flag, suffix", [(False, "@client-tokenizer"), (None, "@token-count-unknown")])
def test_aiperf_figures_counted_by_its_tokenizer_have_a_definition_of_their_own(tmp_path, flag, suffix):
    """aiperf counts tokens from the server's usage or with its own tokenizer: two branches of one definition,
    which the gate must not take for one."""
    from labkit.lab import compare

    doc = json.loads(AIPERF.read_text())
    doc["input_config"]["endpoint"]["use_server_token_count"] = flag
    path = tmp_path / "client.json"
    path.write_text(json.dumps(doc))
    [client] = import_file(path, lane="client", results=tmp_path / "r")
    [server] = import_file(AIPERF, lane="server", results=tmp_path / "r")
    info = read_run(client.path)
    decode = next(row for row in info.measure_info.values() if row.about == "decode_c1")
    assert str(decode.definition).endswith(suffix)
    assert info.provenance.raw["use_server_token_count"] == (False if flag is False else "unknown")
    ids = [str(row.definition) for row in read_run(server.path).measure_info.values() if row.about]
    assert ids and not any("@" in i for i in ids)
    c = compare("client", "server", results=tmp_path / "r", force=True, measures=["decode_c1"])
    assert "definition of decode_c1" in c.gate.blocked
