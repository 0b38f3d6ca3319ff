"""`labkit import` of a real `vllm bench serve` file (recorded once here, tests/support/fixtures/imports/): the
format recognised by its keys, every figure stored under its own name with its definition, the tool, the
file's hash and the file itself kept, the provenance it does not carry "unknown", and a second import of the
same file leaving the runs alone."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from labkit.exchange import import_file
from labkit.exchange.definitions import definition
from labkit.exchange.importing import ORIGINAL_PREFIX, read_file
from labkit.store import read_run
from tests.support.imports import FIXTURES

C1 = FIXTURES / "imports" / "vllm-bench-c1.json"
C2 = FIXTURES / "imports" / "vllm-bench-c2.json"


def test_the_file_is_recognised_by_its_keys_and_its_figures_keep_their_names():
    [imp], data = read_file(C1)
    doc = json.loads(C1.read_text())
    assert imp.format == "vllm-bench" and imp.tool == "vllm bench serve"
    assert imp.tool_version == "unknown"  # the file names no version
    assert (imp.setting.concurrency, imp.setting.requests, imp.setting.rate) == (1, 6, "inf")
    assert imp.figures["median_tpot_ms"] == doc["median_tpot_ms"]
    assert imp.figures["p99_ttft_ms"] == doc["p99_ttft_ms"]
    assert imp.figures["completed"] == 6 and imp.figures["failed"] == 0
    assert "ttfts" not in imp.figures and "generated_texts" not in imp.figures  # arrays stay in the file
    assert imp.provenance["model"] == "tiny" and imp.provenance["per_request_arrays"] is True
    assert data == C1.read_bytes()


def test_an_import_stores_one_run_with_definitions_provenance_and_the_file(tmp_path):
    [outcome] = import_file(C1, results=tmp_path)
    assert outcome.action == "created"
    doc = read_run(outcome.path)
    assert (doc.recipe, doc.variant_id, doc.source) == (
        "import-tiny",
        "vllm-bench_c1_in128",
        "import",
    )
    prov = doc.provenance
    assert prov.tool == "vllm bench serve" and prov.raw["format"] == "vllm-bench"
    assert prov.file_sha256 == hashlib.sha256(C1.read_bytes()).hexdigest()
    assert prov.engine_version == prov.raw["engine_image"] == prov.raw["boot"] == "unknown"
    kept = outcome.path / (ORIGINAL_PREFIX + C1.name)
    assert kept.read_bytes() == C1.read_bytes() and kept.name in doc.files
    measures, info, method = doc.summary.measures, doc.measure_info, doc.summary.method
    assert measures["vllm-bench:median_tpot_ms"] == json.loads(C1.read_text())["median_tpot_ms"]
    tpot = info["vllm-bench:median_tpot_ms"]
    assert (tpot.about, tpot.convert, tpot.raw["exact"]) == ("decode_c1", "1000/x", False)
    assert tpot.converted == pytest.approx(1000 / (measures["vllm-bench:median_tpot_ms"] or 0))
    assert (
        "decode_c1" not in measures and "ttft_c1" not in measures
    )  # not labkit's definitions: own names only
    assert definition("vllm-bench", "median_tpot_ms").text in method["vllm-bench:median_tpot_ms"]
    assert info["vllm-bench:p99_ttft_ms"].definition == "vllm-bench:p99_ttft_ms"
    assert "about" not in info["vllm-bench:p99_ttft_ms"].raw


def test_importing_the_same_file_again_changes_nothing(tmp_path):
    [first] = import_file(C1, results=tmp_path)
    before = (first.path / "run.json").read_bytes()
    [again] = import_file(C1, results=tmp_path)
    assert (again.action, again.path) == ("unchanged", first.path)
    assert (first.path / "run.json").read_bytes() == before


def test_a_lane_name_and_a_recipe_place_the_runs(tmp_path):
    [named] = import_file(C2, lane="spark-lab", results=tmp_path)
    assert named.path.parent == tmp_path / "spark-lab" / "vllm-bench_c2_in128"
    [tied] = import_file(C2, recipe="tiny-vllm", results=tmp_path / "other")
    doc = read_run(tied.path)
    assert doc.recipe == "tiny-vllm" and doc.plan.resolved["engine"]["kind"] == "vllm"
    assert doc.plan.imported is not None and doc.plan.imported.format == "vllm-bench"


def test_a_lane_name_that_is_a_recipe_is_refused_before_anything_is_stored(tmp_path):
    from labkit.exchange.jsonfile import ImportFileError

    with pytest.raises(ImportFileError, match="--recipe tiny-vllm"):
        import_file(C1, lane="tiny-vllm", results=tmp_path)
    assert not any(Path(tmp_path).iterdir())


def test_a_result_imported_under_one_lane_is_refused_under_another(tmp_path):
    """One run id in two folders would hide one of them from the tables: the second import names the first."""
    from labkit.exchange.jsonfile import ImportFileError
    from labkit.store import load_results

    [first] = import_file(C1, lane="lab-a", results=tmp_path)
    with pytest.raises(ImportFileError, match=f"already imported as {first.path}.*under lab-b"):
        import_file(C1, lane="lab-b", results=tmp_path)
    assert not (tmp_path / "lab-b").exists()
    assert list(load_results(tmp_path).docs) == [first.run_id]


def test_appending_to_a_json_lines_file_keeps_the_earlier_results_ids(tmp_path):
    """--append-result adds a line per run: importing the grown file stores only the new line."""
    lines = tmp_path / "bench.jsonl"
    one = json.dumps(json.loads(C1.read_text()))
    lines.write_text(one + "\n")
    [first] = import_file(lines, results=tmp_path / "r")
    lines.write_text(one + "\n" + json.dumps(json.loads(C2.read_text())) + "\n")
    again = import_file(lines, results=tmp_path / "r")
    assert [(o.action, o.run_id) for o in again][0] == ("unchanged", first.run_id)
    assert again[1].action == "created" and again[1].run_id != first.run_id


def test_a_result_stored_under_an_earlier_labkits_run_id_is_found_by_its_files_hash(tmp_path):
    """Imports stored before run ids came from the result (import-<file hash>-<i>) are the same result."""
    from labkit.exchange.jsonfile import ImportFileError

    [first] = import_file(C1, results=tmp_path)
    old = first.path.with_name("import-72cbb8ba475f-0")
    first.path.rename(old)
    doc = json.loads((old / "run.json").read_text())
    doc["run_id"] = old.name
    (old / "run.json").write_text(json.dumps(doc))
    with pytest.raises(ImportFileError, match=f"imported before as {old}"):
        import_file(C1, results=tmp_path)
    assert [p.name for p in old.parent.iterdir()] == [old.name]


def test_a_leftover_folder_of_the_run_id_is_refused_before_anything_is_stored(tmp_path):
    from labkit.exchange.jsonfile import ImportFileError

    [first] = import_file(C1, results=tmp_path / "probe")
    leftover = tmp_path / "r" / first.path.relative_to(tmp_path / "probe")
    leftover.mkdir(parents=True)
    with pytest.raises(ImportFileError, match="exists but holds no run.json"):
        import_file(C1, results=tmp_path / "r")
    assert list(leftover.iterdir()) == []


def test_a_result_the_file_holds_twice_is_stored_once_and_said_so(tmp_path):
    lines = tmp_path / "twice.jsonl"
    one = json.dumps(json.loads(C1.read_text()))
    lines.write_text(one + "\n" + one + "\n")
    first, second = import_file(lines, results=tmp_path / "r")
    assert (first.action, second.action) == ("created", "duplicate") and first.path == second.path
