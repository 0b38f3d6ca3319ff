"""Files `labkit import` must refuse, each with the file and the key (or line) named and nothing stored: a
truncated file, an unknown key, a huge file, NaN, a negative duration, a file claiming another tool, a format
asked for that the file is not, and something that is no result file at all. Each is the recorded real
`vllm bench serve` file with one thing changed."""

from __future__ import annotations

import json
import os

import pytest

from labkit.cli.app import main
from labkit.exchange import import_file
from labkit.exchange.jsonfile import ImportFileError
from tests.support.imports import IMPORTS, edited

C1 = IMPORTS / "vllm-bench-c1.json"


def refused(path, results, match: str, **kwargs) -> str:
    with pytest.raises(ImportFileError) as e:
        import_file(path, results=results, **kwargs)
    text = str(e.value)
    assert str(path) in text or "--format" in text, text
    assert match in text, text
    assert not results.exists() or not any(results.iterdir())  # nothing stored
    return text


def test_a_truncated_file_is_refused_saying_it_ends_early(tmp_path):
    bad = tmp_path / "cut.json"
    bad.write_bytes(C1.read_bytes()[:1000])
    refused(bad, tmp_path / "results", "truncated")


def test_an_unknown_key_is_refused_by_name_unless_kept_unread(tmp_path):
    bad = edited(C1, tmp_path / "extra.json", {"tokens_per_joule": [1, 2]})
    text = refused(bad, tmp_path / "results", "key 'tokens_per_joule' is not one vllm bench serve writes")
    assert "--extra-keys" in text
    from labkit.exchange import ReadOptions

    [outcome] = import_file(bad, results=tmp_path / "kept", options=ReadOptions(extra_keys=True))
    assert "tokens_per_joule" in outcome.imported.unread


def test_text_keys_are_the_benchs_own_metadata_pairs(tmp_path):
    """--metadata K=V writes K as a top-level text key: read as metadata, not refused."""
    meta = edited(C1, tmp_path / "meta.json", {"gpu": "GB10", "fabric": "roce"})
    [outcome] = import_file(meta, results=tmp_path / "results")
    assert outcome.imported.provenance["metadata"] == {"gpu": "GB10", "fabric": "roce"}


def test_a_huge_file_is_refused_before_it_is_read(tmp_path):
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(65 * 2**20)  # sparse: the size check must come before any read
    refused(huge, tmp_path / "results", "over the import limit")


def test_nan_is_refused_naming_the_key(tmp_path):
    bad = tmp_path / "nan.json"
    bad.write_text(C1.read_text().replace('"median_tpot_ms": ', '"median_tpot_ms": NaN, "x_": '))
    refused(bad, tmp_path / "results", "key 'median_tpot_ms' is NaN or Infinity")


def test_a_negative_duration_is_refused(tmp_path):
    bad = edited(C1, tmp_path / "neg.json", {"duration": -3.5})
    refused(bad, tmp_path / "results", "key 'duration' is -3.5")


def test_a_negative_per_request_time_is_refused_naming_its_place(tmp_path):
    doc = json.loads(C1.read_text())
    doc["itls"][2][5] = -0.001
    bad = tmp_path / "itl.json"
    bad.write_text(json.dumps(doc))
    refused(bad, tmp_path / "results", "key 'itls[2]")


def test_a_file_claiming_another_tool_is_refused(tmp_path):
    """The vLLM header plus llama-benchy's: one file cannot be both tools' result."""
    bad = edited(C1, tmp_path / "both.json", {"latency_mode": "api", "benchmarks": []})
    refused(bad, tmp_path / "results", "claims to be")


def test_a_format_asked_for_that_the_file_is_not_is_refused(tmp_path):
    refused(C1, tmp_path / "results", "the file is vllm-bench", fmt="llama-benchy")
    refused(C1, tmp_path / "results", "not a format labkit reads", fmt="benchy")


def test_a_file_of_no_known_tool_names_the_formats_labkit_reads(tmp_path):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"results": {"ttft": 1.0}}))
    refused(other, tmp_path / "results", "vllm-bench (vllm bench serve)")


def test_the_cli_says_the_reason_in_one_line_and_exits_1(tmp_path, capsys):
    bad = edited(C1, tmp_path / "neg.json", {"duration": -1})
    assert main(["import", str(bad), "--results", str(tmp_path / "results")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("labkit: error: ") and "key 'duration'" in err and len(err.splitlines()) == 1
    assert not os.path.exists(tmp_path / "results") or not os.listdir(tmp_path / "results")
