"""The store owns the run folder: boot.json is written atomically, and every name in a run folder (what the
lane's sink and a bench result write) is one of store's constants; no other package spells one."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from labkit import store
from labkit.measure import BenchResult, RunSummary
from labkit.measure.records import GroupRecord
from labkit.serve import BootFacts
from labkit.store import files
from tests.support.results import REPO, requests_for, sim_plan

TELEMETRY_CSV = "t_ns,source,power_w\n1000000000,nvidia-smi,41.5\n"


def crash(src, dst):
    """os.replace failing: the write dies between writing the new bytes and putting them in place."""
    raise OSError("disk gone")


def test_boot_json_is_written_atomically_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    sink = store.RunFolderSink(tmp_path)
    sink.boot(BootFacts(engine_version="1.0", boot_seconds=2.5))
    before = (tmp_path / store.files.BOOT_FILE).read_text()
    assert json.loads(before)["engine_version"] == "1.0"
    monkeypatch.setattr(files.os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        sink.boot(BootFacts(engine_version="2.0", kv_pool_tokens=10**6))
    assert (tmp_path / store.files.BOOT_FILE).read_text() == before  # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [store.files.BOOT_FILE]  # no partial or temp file


def test_no_boot_json_at_all_when_the_first_write_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(files.os, "replace", crash)
    with pytest.raises(OSError):
        store.runfiles.write_boot(tmp_path, BootFacts(engine_version="1.0"))
    assert list(tmp_path.iterdir()) == []


def test_a_run_folder_holds_only_names_from_stores_constants(tmp_path):
    plan = sim_plan()
    result = BenchResult(
        records=requests_for("x", n=2),
        groups=[GroupRecord(run_id="x", agg_tps=50.0)],
        summary=RunSummary(measures={"decode_c1": 30.0}, n_ok=2),
        provenance={},
        scrapes={"decode.before": "# HELP x\n"},
        io={"nfs": {"read_bytes": 1.0}},
        telemetry={"node-a": TELEMETRY_CSV},
    )
    with store.ResultsStore(tmp_path).new_run(plan) as run:
        sink = store.RunFolderSink(run.path)
        sink.open()
        sink.node_log("node-a", "INFO booting\n")
        sink.node_log("node-a", "INFO ready\n")
        sink.boot(BootFacts(boot_seconds=1.0))
        store.write_staging(run, {"nodes": {}})
        store.write_result(run, result)
        run.finish(result.summary)
    present = {p.relative_to(run.path).as_posix() for p in run.path.rglob("*") if p.is_file()}
    assert present == {
        store.files.RUN_FILE,
        store.files.REQUESTS_FILE,
        store.files.CHUNKS_FILE,
        store.files.GROUPS_FILE,
        store.files.SCRAPES_FILE,
        store.files.IO_FILE,
        store.files.STAGING_FILE,
        store.files.BOOT_FILE,
        store.files.node_log_name("node-a"),
        store.files.telemetry_name("node-a"),
    }
    assert set(store.read_run(run.path).files) == present
    assert (run.path / store.files.node_log_name("node-a")).read_text() == "INFO booting\nINFO ready\n"
    assert store.read_telemetry(run.path) == {"node-a": TELEMETRY_CSV}
    assert store.telemetry_rows(TELEMETRY_CSV) == [
        {"t_ns": "1000000000", "source": "nvidia-smi", "power_w": "41.5"}
    ]


RUN_FOLDER_NAMES = {
    files.RUN_FILE,
    files.REQUESTS_FILE,
    files.CHUNKS_FILE,
    files.GROUPS_FILE,
    files.SCRAPES_FILE,
    files.IO_FILE,
    files.STAGING_FILE,
    files.BOOT_FILE,
    files.ENGINE_LOG_FILE,
    files.NOTEBOOK_FILE,
}


def spelled_names(path: Path) -> list[str]:
    """String constants in a module that are a run folder's file name, or start a per-node one."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in RUN_FOLDER_NAMES or text.startswith((files.TELEMETRY_PREFIX, files.LOGS_DIR + "/")):
                out.append(f"{path.relative_to(REPO)}:{node.lineno}: {text!r}")
    return out


def test_only_store_spells_the_names_of_a_run_folder():
    outside = [p for p in sorted((REPO / "labkit").rglob("*.py")) if "store" not in p.relative_to(REPO).parts]
    found = [hit for p in outside for hit in spelled_names(p)]
    assert found == [], "run-folder names belong in labkit/store/files.py: " + "; ".join(found)
