"""run.json parsed once into a StoredRun (labkit/store/storedrun.py, runparts.py): every committed run folder
loads, a malformed part names the file and the dotted key, and older shapes read as their readers assumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit import report as rp
from labkit.store import ResultsError, load_results, read_run
from labkit.store.files import RUN_FILE, RUN_SCHEMA_VERSION
from tests.support.record import tracked_record
from tests.support.results import REPO, stored_run

# the run folders git holds (what `make bench` or a user adds to results/ is no part of the committed record)
COMMITTED = sorted({REPO / Path(p).parent for p in tracked_record() if Path(p).name == RUN_FILE})


def test_the_lab_record_holds_runs_of_every_source():
    """The test below reads every committed run; it is worth something only while there are several kinds."""
    sources = {json.loads((p / RUN_FILE).read_text())["source"] for p in COMMITTED}
    assert sources == {"measured", "recorded", "import"}


@pytest.mark.parametrize("folder", COMMITTED, ids=lambda p: str(p.relative_to(REPO / "results")))
def test_every_committed_run_loads_with_its_parts_typed(folder):
    raw = json.loads((folder / RUN_FILE).read_text())
    run = read_run(folder)
    assert (run.run_id, run.path, run.status, run.source) == (
        raw["run_id"],
        folder,
        raw["status"],
        raw["source"],
    )
    assert run.raw == raw and run.plan.raw == raw["plan"] and run.provenance.raw == raw["provenance"]
    assert dict(run.summary.measures) == raw["summary"]["measures"]
    assert [f.code for f in run.summary.flags] == [f["code"] for f in raw["summary"].get("flags", [])]
    assert set(run.measure_info) == set(raw.get("measure_info", {}))
    assert (run.recorded is not None) == (run.source == "recorded") == ("recorded" in raw)
    assert (run.imported is not None) == (run.source == "import") == (run.plan.imported is not None)
    if run.imported is not None:
        assert run.imported.fingerprint == raw["imported"]["fingerprint"]
        assert (
            run.plan.imported is not None
            and run.plan.imported.compared == raw["plan"]["imported"]["compared"]
        )
    assert run.provenance.prompt_seed == raw["provenance"].get("prompt_seed")


def test_load_results_skips_nothing_of_the_committed_record(lab_record):
    data = load_results(lab_record)
    assert data.skipped == [] and set(data.docs) == {p.name for p in COMMITTED}
    assert all(run.path == Path(row) for run, row in zip(data.docs.values(), data.runs["path"], strict=True))


def _write(tmp_path: Path, doc: object) -> Path:
    folder = tmp_path / "sim" / "spec-none" / "r1"
    folder.mkdir(parents=True)
    (folder / RUN_FILE).write_text(json.dumps(doc))
    return folder


def _run(**parts: object) -> dict[str, object]:
    return {"run_id": "r1", "schema_version": RUN_SCHEMA_VERSION, "status": "complete", **parts}


@pytest.mark.parametrize(
    "parts, named",
    [
        ({"summary": {"measures": {"decode_c1": "fast"}}}, "summary.measures.decode_c1: expected a number"),
        ({"summary": {"measures": {"decode_c1": True}}}, "summary.measures.decode_c1: expected a number"),
        ({"summary": {"flags": [{"window": "decode"}]}}, "summary.flags[0].code: missing"),
        ({"summary": {"flags": ["junk"]}}, "summary.flags[0]: expected an object, found a string"),
        ({"summary": {"method": {"decode_c1": 3}}}, "summary.method.decode_c1: expected a string"),
        ({"boot": {"state": {"n1": {"kernel": 6}}}}, "boot.state.n1.kernel: expected a string"),
        ({"boot": {"images": {"n1": "sha256:1"}}}, "boot.images.n1: expected an object"),
        ({"provenance": "somewhere"}, "provenance: expected an object, found a string"),
        ({"provenance": {"cold_expected": "yes"}}, "provenance.cold_expected: expected true or false"),
        ({"provenance": {"sweep": {"axes": {"dt": "engine"}}}}, "provenance.sweep.axes.dt: expected a list"),
        ({"measure_info": {"decode_c1": {"min": "47"}}}, "measure_info.decode_c1.min: expected a number"),
        (
            {"plan": {"imported": {"compared": []}}},
            "plan.imported.compared: expected an object, found a list",
        ),
        ({"plan": {"resolved": "sim"}}, "plan.resolved: expected an object"),
        ({"variants": {"spec": 1}}, "variants.spec: expected a string"),
        ({"files": "run.json"}, "files: expected a list"),
        ({"status": "done"}, "status: 'done' is none of incomplete, complete, failed"),
        ({"source": "guessed"}, "source: 'guessed' is none of measured, recorded, import"),
    ],
)
def test_a_malformed_part_names_the_file_and_the_key(tmp_path, parts, named):
    folder = _write(tmp_path, _run(**parts))
    with pytest.raises(ResultsError) as err:
        read_run(folder)
    assert str(err.value).startswith(f"{folder / RUN_FILE}: {named}")
    data = load_results(tmp_path)  # the report lists it as skipped, with the reason, and goes on
    assert data.skipped == [(str(folder), str(err.value))] and data.docs == {}


@pytest.mark.parametrize(
    "doc, why",
    [
        ({"schema_version": RUN_SCHEMA_VERSION}, "not a labkit run.json (no run_id)"),
        ([1, 2], "not a labkit run.json (no run_id)"),
        ({"run_id": "r1", "schema_version": RUN_SCHEMA_VERSION + 1}, "is not supported"),
        ({"run_id": "r1"}, "schema_version None is not supported"),
        ({"run_id": 7, "schema_version": RUN_SCHEMA_VERSION}, "run_id: expected a string"),
    ],
)
def test_what_is_no_readable_run_json_is_refused_naming_the_file(tmp_path, doc, why):
    folder = _write(tmp_path, doc)
    with pytest.raises(ResultsError, match=str(folder / RUN_FILE)) as err:
        read_run(folder)
    assert why in str(err.value)


def test_absent_parts_read_as_their_readers_assumed():
    """An incomplete run (summary null), a recorded one (no boot), an import by an earlier labkit (no
    compared setting), a seed stored as a number."""
    run = stored_run({"run_id": "r1", "summary": None, "provenance": {"prompt_seed": 7}})
    assert (run.status, run.source, run.label, run.n_requests) == ("incomplete", "measured", "", 0)
    assert run.summary.measures == {} and run.summary.flags == () and run.boot.state == {}
    assert run.provenance.prompt_seed == "7" and rp.gate.prompt_set(run) == "seed 7"
    assert (
        run.plan.measure == {}
        and run.plan.image is None
        and rp.gate.images(run.boot, run.plan).startswith("none")
    )
    old_import = stored_run(
        {
            "run_id": "import-1",
            "source": "import",
            "plan": {"imported": {"format": "vllm-bench", "tool": "vllm bench serve", "setting": {}}},
        }
    )
    assert old_import.plan.imported is not None and old_import.plan.imported.compared == {}
    assert rp.gate.measure_plan(old_import) == '{"imported": {}}'


def test_boot_state_and_images_are_read_per_node():
    run = stored_run(
        {
            "run_id": "r1",
            "boot": {
                "engine_version": "0.32.0",
                "images": {"a": {"id": "sha256:1"}, "b": {"id": None, "image": "vllm:x"}},
                "state": {
                    "a": {"kernel": "6.8", "caches": {"vllm": {"files": 3}}, "cold": []},
                    "b": {"kernel": "6.8", "caches": {"vllm": None}, "cold": ["vllm"]},
                },
            },
        }
    )
    assert run.boot.image_ids == {"a": "sha256:1"} and run.boot.engine_version == "0.32.0"
    assert run.boot.state["b"].cold == ("vllm",) and run.boot.state["a"].caches
    assert rp.gate.compile_caches(run) == "cold on b"
