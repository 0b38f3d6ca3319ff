import csv
import json
import os
import subprocess
import sys

import pytest

from labkit import store as R
from labkit.measure import RequestRecord, RunSummary
from labkit.store import runs
from labkit.store.chunks import CHUNK_COLUMNS
from tests.support.results import REPO, make_sim_run, requests_for, sim_plan


def test_run_layout_and_round_trip(tmp_path):
    store = R.ResultsStore(tmp_path)
    plan = sim_plan("dspark")
    records = requests_for("x", n=3)
    summary = RunSummary(
        measures={"decode_c1": 31.5, "accept_per_draft": 3.1},
        n_ok=3,
        n_failed=1,
        method={"decode_c1": "usage"},
        notes=["hello"],
    )
    with store.new_run(plan) as run:
        assert json.loads((run.path / "run.json").read_text())["status"] == "incomplete"
        run.write_requests(records)
        run.write_log_tail("\n".join(f"line {i}" for i in range(5000)))
        run.finish(summary, boot={"kv_pool_tokens": 123}, provenance={"git": "abc"})
    assert run.path.parent.parent.parent == tmp_path
    assert run.path.parent.name == plan.variant_id == "spec-dspark"
    assert run.path.parent.parent.name == "sim"
    doc = R.read_run(run.path)
    assert doc.status == "complete"
    assert doc.schema_version == R.files.RUN_SCHEMA_VERSION
    assert doc.simulated is True
    assert doc.plan.raw == json.loads(json.dumps(plan.to_dict()))
    assert RunSummary.from_dict(dict(doc.summary.raw)) == summary
    assert doc.boot.raw == {"kv_pool_tokens": 123}
    assert doc.provenance.raw["git"] == "abc"
    assert set(doc.files) >= {"run.json", "requests.csv", "engine.log"}
    log = (run.path / "engine.log").read_text().splitlines()
    assert len(log) == 2000 and log[-1] == "line 4999"
    with open(run.path / "requests.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [c for c in RequestRecord.columns() if c not in CHUNK_COLUMNS]  # chunks apart
    assert [int(r["turn"]) for r in rows] == [0, 1, 2]
    assert rows[0]["cold"] == "True" and rows[1]["cold"] == "False"
    assert not [p for p in run.path.iterdir() if p.name.endswith(".tmp")]


def test_run_ids_sort_by_time():
    import datetime as dt

    a = R.runs.new_run_id(dt.datetime(2026, 11, 30, 4, 20, 1, tzinfo=dt.UTC))
    b = R.runs.new_run_id(dt.datetime(2026, 11, 30, 4, 20, 2, tzinfo=dt.UTC))
    assert a.startswith("20261130T042001Z-") and a < b


def test_explicit_run_id_is_never_overwritten(tmp_path):
    store = R.ResultsStore(tmp_path)
    with store.new_run(sim_plan(), run_id="r1") as run:
        run.finish(RunSummary(measures={"decode_c1": 1.0}))
    before = (run.path / "run.json").read_bytes()
    with pytest.raises(R.ResultsError, match="already exists"):
        store.new_run(sim_plan(), run_id="r1")
    assert (run.path / "run.json").read_bytes() == before


def test_colliding_generated_id_gets_a_fresh_one(tmp_path, monkeypatch):
    ids = iter(["same", "same", "other"])
    monkeypatch.setattr(runs, "new_run_id", lambda now=None: next(ids))
    store = R.ResultsStore(tmp_path)
    first = store.new_run(sim_plan())
    second = store.new_run(sim_plan())
    assert (first.run_id, second.run_id) == ("same", "other")


def test_finished_run_cannot_be_written_again(tmp_path):
    with R.ResultsStore(tmp_path).new_run(sim_plan()) as run:
        run.finish(RunSummary())
    with pytest.raises(R.ResultsError, match="already complete"):
        run.write_requests([])
    with pytest.raises(R.ResultsError):
        run.finish(RunSummary())


def test_exception_marks_run_failed(tmp_path):
    store = R.ResultsStore(tmp_path)
    with pytest.raises(RuntimeError), store.new_run(sim_plan()) as run:
        run.write_requests(requests_for("x", n=1))
        raise RuntimeError("engine died")
    doc = R.read_run(run.path)
    assert doc.status == "failed" and "engine died" in doc.error
    data = R.load_results(tmp_path)
    assert data.runs["status"].tolist() == ["failed"]
    assert len(data.measures) == 0 and data.skipped


def test_leaving_without_finish_stays_incomplete(tmp_path):
    with R.ResultsStore(tmp_path).new_run(sim_plan()) as run:
        run.write_requests(requests_for("x", n=1))
    assert R.read_run(run.path).status == "incomplete"


def test_crash_leaves_run_visibly_incomplete(tmp_path):
    """A process killed mid-run (os._exit: no finally, no __exit__) leaves status incomplete."""
    code = (
        "import os, sys\n"
        "sys.path.insert(0, sys.argv[2]); sys.path.insert(0, sys.argv[3])\n"
        "from tests.support.results import sim_plan, requests_for\n"
        "from labkit.store import ResultsStore\n"
        "with ResultsStore(sys.argv[1]).new_run(sim_plan()) as run:\n"
        "    run.write_requests(requests_for(run.run_id, n=2))\n"
        "    run.update(boot={'kv_pool_tokens': 5})\n"
        "    os._exit(3)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(REPO / "tests"), str(REPO)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 3, proc.stderr
    [path] = R.ResultsStore(tmp_path).run_paths()
    doc = R.read_run(path)
    assert doc.status == "incomplete" and doc.boot.raw == {"kv_pool_tokens": 5}
    data = R.load_results(tmp_path)
    assert data.runs["status"].tolist() == ["incomplete"]
    assert len(data.measures) == 0
    assert data.skipped == [(str(path), "status incomplete")]
    assert len(R.load_results(tmp_path, include_incomplete=True).docs) == 1


def test_atomic_write_keeps_old_file_when_replace_fails(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    R.atomic_write_text(target, "old")

    def boom(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        R.atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]


def test_bad_names_are_refused(tmp_path):
    store = R.ResultsStore(tmp_path)
    with pytest.raises(R.ResultsError, match="folder name"):
        store.new_run({"recipe": "../evil", "variant_id": "x"})
    with pytest.raises(R.ResultsError, match="missing 'variant_id'"):
        store.new_run({"recipe": "x"})
    with pytest.raises(R.ResultsError, match="status"):
        store.new_run(sim_plan(), status="complete")
    assert list(tmp_path.iterdir()) == []


def test_results_root_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path / "env"))
    assert R.results_root() == tmp_path / "env"
    assert R.results_root(tmp_path / "arg") == tmp_path / "arg"
    monkeypatch.delenv("LABKIT_RESULTS")
    assert R.results_root() == REPO / "results"


def test_loader_dataframes(tmp_path):
    make_sim_run(
        tmp_path,
        {"decode_c1": 30.0, "decode_c1_cold": 20.0, "prefill_4096": 700.0},
        run_id="20261130T0001Z-a",
    )
    make_sim_run(tmp_path, {"decode_c1": 32.0, "prefill_4096": None}, run_id="20261130T0002Z-b")
    make_sim_run(tmp_path, {"decode_c1": 50.0}, spec="dspark", with_requests=False)
    data = R.load_results(tmp_path)
    assert list(data.runs.columns) == R.load.RUN_COLUMNS
    assert len(data.runs) == 3 and set(data.runs["status"]) == {"complete"}
    assert list(data.measures.columns) == R.load.MEASURE_COLUMNS
    m = data.measures
    c1 = m[(m.measure == "decode_c1") & (m.variant == "spec-none")].sort_values("run")
    assert c1["value"].tolist() == [30.0, 32.0]
    assert c1["min"].tolist() == [30.0, 32.0] and c1["max"].tolist() == [30.0, 32.0]
    assert set(m["source"]) == {"measured"} and m["simulated"].all()
    assert not ((m.measure == "prefill_4096") & (m.run == "20261130T0002Z-b")).any()  # None is not a figure
    req = data.requests()
    assert len(req) == 8  # the dspark run has no requests.csv
    assert {"run", "recipe", "variant", "decode_tps"} <= set(req.columns)
    assert set(req["run"]) == {"20261130T0001Z-a", "20261130T0002Z-b"}


def test_loader_treats_unknown_fields_generically(tmp_path):
    path = make_sim_run(tmp_path, {"decode_c1": 30.0})
    doc = json.loads((path / "run.json").read_text())
    doc["summary"]["future_field"] = {"x": 1}
    doc["summary"]["measures"]["some_new_measure"] = 7.5
    doc["new_top_level"] = True
    (path / "run.json").write_text(json.dumps(doc))
    with open(path / "requests.csv") as f:
        lines = f.read().splitlines()
    lines = [lines[0] + ",extra_col"] + [line + ",42" for line in lines[1:]]
    (path / "requests.csv").write_text("\n".join(lines) + "\n")
    data = R.load_results(tmp_path)
    assert 7.5 in data.measures[data.measures.measure == "some_new_measure"]["value"].tolist()
    assert data.requests()["extra_col"].tolist() == [42] * 4


def test_write_requests_keeps_extra_keys(tmp_path):
    with R.ResultsStore(tmp_path).new_run(sim_plan()) as run:
        row = requests_for("x", n=1)[0].to_row()
        row["engine_note"] = "from a newer labkit"
        row["chunk_t"] = [1, 2, 3]
        run.write_requests([row])
        run.finish(RunSummary())
    with open(run.path / "requests.csv", newline="") as f:
        header = next(csv.reader(f))
    columns = [c for c in RequestRecord.columns() if c not in CHUNK_COLUMNS]
    assert header[-1] == "engine_note" and header[: len(columns)] == columns
    assert R.load_results(tmp_path).requests()["chunk_t"].iloc[0] == "[1,2,3]"  # lists stored as JSON


def test_unreadable_and_future_runs_are_skipped_with_reason(tmp_path):
    good = make_sim_run(tmp_path, {"decode_c1": 30.0})
    bad = good.parent / "20990101T0000Z-bad"
    bad.mkdir()
    (bad / "run.json").write_text("{not json")
    future = good.parent / "20990101T0000Z-future"
    future.mkdir()
    (future / "run.json").write_text(json.dumps({"run_id": "f", "schema_version": 99}))
    data = R.load_results(tmp_path)
    assert len(data.docs) == 1
    reasons = dict(data.skipped)
    assert "not valid JSON" in reasons[str(bad)]
    assert "schema_version 99" in reasons[str(future)]


def test_text_columns_read_back_as_stored(tmp_path):
    records = requests_for("x", n=3)
    records[0].nonce, records[1].nonce, records[2].nonce = "0e1234567890", "0042", ""
    records[0].response_id = "123"
    with R.ResultsStore(tmp_path).new_run(sim_plan()) as run:
        run.write_requests(records)
        run.finish(RunSummary())
    req = R.load_results(tmp_path).requests()
    assert req["nonce"].tolist() == ["0e1234567890", "0042", ""]
    assert req["response_id"].iloc[0] == "123" and req["flags"].iloc[1] == ""
    assert req["decode_tps"].dtype.kind == "f"  # numbers stay numbers
