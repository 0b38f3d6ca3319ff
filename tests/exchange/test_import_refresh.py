"""`labkit import --refresh`: stored imports read again from the files they keep. An import made by an older
labkit (here: its run.json as that labkit wrote it, without the load measures today's reader gives) is brought
up to date in place, atomically, recording when and why; the kept file, the plan and the run id stay; a run
whose kept file is missing refuses the whole refresh before anything is written."""

from __future__ import annotations

import json

import pytest

from labkit.cli.app import main
from labkit.exchange import import_file, refresh_imports
from labkit.exchange.jsonfile import ImportFileError
from labkit.store import read_run, refresh_run
from labkit.store.files import ResultsError
from tests.support.imports import IMPORTS, edited


def _older_import(tmp_path):
    """A rate-paced vllm-bench file imported, then its run.json set back to what a labkit without the load
    mapping stored: the same figures, their definitions without the load measure each speaks of."""
    path = edited(
        IMPORTS / "vllm-bench-c1.json",
        tmp_path / "vllm-rate.json",
        {"request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None},
    )
    [outcome] = import_file(path, lane="refresh-lane", results=tmp_path / "results")
    doc = json.loads((outcome.path / "run.json").read_text())
    load = sorted(k for k, info in doc["measure_info"].items() if "load_about" in info)
    assert load  # today's reader maps them onto labkit's load measures
    for k in load:
        doc["measure_info"][k] = {
            f: v for f, v in doc["measure_info"][k].items() if not f.startswith("load_")
        }
    (outcome.path / "run.json").write_text(json.dumps(doc))
    return outcome.path, load


def test_an_older_import_is_brought_up_to_date_in_place(tmp_path, capsys):
    folder, load = _older_import(tmp_path)
    kept = {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "run.json"}
    plan = json.loads((folder / "run.json").read_text())["plan"]
    assert main(["import", "--refresh", "--results", str(tmp_path / "results")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"refreshed {folder}") and "1 of 1 stored imports refreshed" in out
    run = read_run(folder)
    assert all("load_about" in run.raw["measure_info"][k] for k in load) and run.status == "complete"
    assert f"({len(load)} measures: " in out
    refreshed = run.raw["refreshed"]
    assert len(refreshed) == 1 and "kept file read again" in refreshed[0]["why"] and refreshed[0]["at"]
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.name != "run.json"} == kept
    assert run.raw["plan"] == plan and run.run_id == folder.name
    [again] = refresh_imports(tmp_path / "results")
    assert again.action == "unchanged" and len(read_run(folder).raw["refreshed"]) == 1


def test_a_missing_kept_file_refuses_the_refresh_before_anything_is_written(tmp_path):
    folder, _ = _older_import(tmp_path)
    other = edited(
        IMPORTS / "vllm-bench-c1.json",
        tmp_path / "other.json",
        {"request_rate": 4.0, "burstiness": 1.0, "max_concurrency": None},
    )
    [second] = import_file(other, lane="refresh-lane", results=tmp_path / "results")
    before = (folder / "run.json").read_bytes()
    (second.path / f"original-{other.name}").unlink()
    with pytest.raises(ImportFileError, match="the imported file it keeps .* is missing"):
        refresh_imports(tmp_path / "results")
    assert (folder / "run.json").read_bytes() == before


def test_only_derived_parts_of_a_complete_run_are_rewritten(tmp_path):
    folder, _ = _older_import(tmp_path)
    with pytest.raises(ResultsError, match="plan of a stored run are never rewritten"):
        refresh_run(folder, {"plan": {}}, "test")
    assert main(["import", "x.json", "--refresh"]) == 1
