import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from labkit import notebooks as nbk
from labkit import report as rp
from labkit.progress import batch_mode, progress
from tests.support.results import REPO, make_sim_run

TEMPLATES = sorted((REPO / "notebooks").glob("*.ipynb"))
NBSTRIPOUT = Path(sys.executable).parent / "nbstripout"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_templates_are_thin_and_runnable_by_papermill(path):
    nb = nbformat.read(path, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1
    assert all(
        not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code"
    )


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_papermill_reads_every_parameter_without_a_warning(path, caplog):
    """papermill skips a parameter line holding more than one '=' (a comment's "None = ...", a KEY=V default)
    with an "Unable to parse line" warning, and --help-notebook then leaves the parameter out."""
    import ast

    import papermill

    cell = next(
        c for c in nbformat.read(path, as_version=4).cells if "parameters" in c.metadata.get("tags", [])
    )
    assigned = [t.id for n in ast.parse(cell.source).body if isinstance(n, ast.Assign) for t in n.targets]
    with caplog.at_level("WARNING", logger="papermill"):
        found = papermill.inspect_notebook(str(path))
    assert list(found) == assigned
    assert not [r for r in caplog.records if "Unable to parse" in r.getMessage()]


@pytest.mark.skipif(not NBSTRIPOUT.exists(), reason="nbstripout not installed")
def test_templates_are_stripped():
    proc = subprocess.run([str(NBSTRIPOUT), "--verify", *map(str, TEMPLATES)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_compare_notebook_runs_against_temp_results_and_writes_tables(tmp_path, committed_record):
    res = tmp_path / "results"
    shutil.copytree(committed_record, res, ignore=shutil.ignore_patterns("TABLES.md"))
    make_sim_run(res, {"decode_c1": 30.1, "decode_c1_cold": 18.2, "prefill_4096": 702.0})
    out_md = tmp_path / "written" / "TABLES.md"
    out_md.parent.mkdir()
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    executed = nbk.execute(
        "compare",
        {"results_dir": str(res), "write_tables": True, "out": str(out_md), "tables": "measured,dspark"},
        tmp_path / "nb" / "compare-out.ipynb",
        cwd=elsewhere,
        progress=False,
        log_output=False,
    )
    assert executed.is_file()
    assert out_md.read_text(encoding="utf-8") == rp.generate(res, write=False, plots=False).markdown
    assert (out_md.parent / "plots" / "measures.png").is_file()  # plots sit next to the tables
    nb = nbformat.read(executed, as_version=4)
    html = "".join(
        o.get("data", {}).get("text/html", "")
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert "simulated stock vLLM (sim)" in html and "4.79 of 5" in html
    assert "Baseline, no speculation" not in html  # tables=measured,dspark selects two tables
    images = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    ]
    assert len(images) >= 3  # bars, prefill, tokens over time


def test_labkit_run_cli_defaults(tmp_path):
    """Output folder created under the caller's cwd, kernel in the repo root, batch env, safe -p parsing."""
    probe = tmp_path / "probe.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell(
            "run_id = None\ncount = 0\nflag = False\nreport = None", metadata={"tags": ["parameters"]}
        ),
        nbformat.v4.new_code_cell(
            "import json, os, labkit\n"
            "json.dump({'run_id': run_id, 'count': count, 'flag': flag, 'report': report,\n"
            "           'batch': os.environ.get('LABKIT_BATCH'), 'cwd': os.getcwd(),\n"
            "           'labkit': labkit.__file__}, open(report, 'w'))"
        ),
    ]
    nbformat.write(nb, probe)
    report = tmp_path / "probe.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "labkit",
            "run",
            str(probe),
            "-p",
            "run_id",
            "007",
            "-p",
            "count",
            "3",
            "-p",
            "flag",
            "True",
            "-r",
            "report",
            str(report),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(report.read_text())
    assert got["run_id"] == "007" and got["count"] == 3 and got["flag"] is True
    assert got["batch"] == "1"
    assert Path(got["cwd"]) == REPO
    assert Path(got["labkit"]).parent == REPO / "labkit"
    [out] = list((tmp_path / "out").glob("probe-*.ipynb"))
    assert f"executed notebook: {Path('out') / out.name}" in proc.stdout


def test_failing_notebook_names_the_cell(tmp_path):
    bad = tmp_path / "bad.ipynb"
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("raise ValueError('nope')"),
    ]
    nbformat.write(nb, bad)
    with pytest.raises(nbk.NotebookError, match="ValueError: nope") as e:
        nbk.execute(bad, {}, tmp_path / "o" / "bad.ipynb", progress=False, log_output=False)
    assert "bad.ipynb" in str(e.value)
    assert (tmp_path / "o" / "bad.ipynb").is_file()  # the executed copy with the traceback is kept


def test_unknown_notebook_lists_templates():
    with pytest.raises(nbk.NotebookError, match="compare"):
        nbk.resolve_notebook("no-such-notebook")
    assert nbk.resolve_notebook("compare") == REPO / "notebooks" / "compare.ipynb"


@pytest.mark.parametrize(
    "text,value",
    [
        ("True", True),
        ("False", False),
        ("None", None),
        ("3", 3),
        ("0.5", 0.5),
        ("007", "007"),
        ("1e3", "1e3"),
        ("1_000", "1_000"),
        ("dspark", "dspark"),
        ("-2", -2),
    ],
)
def test_guess_value(text, value):
    got = nbk.guess_value(text)
    assert got == value and type(got) is type(value)


def test_batch_mode(monkeypatch):
    monkeypatch.setenv("LABKIT_BATCH", "1")
    assert batch_mode()
    bar = progress(range(3), desc="x")
    assert type(bar).__module__ == "tqdm.std" and bar.mininterval == 30.0
    assert list(bar) == [0, 1, 2]
    monkeypatch.setenv("LABKIT_BATCH", "0")
    assert not batch_mode()


def test_executed_notebook_is_copied_into_the_recorded_run(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell("results = None", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            "from labkit.notebooks import record\n"
            "from labkit.measure import RunSummary\n"
            "from labkit.store import ResultsStore\n"
            "plan = {'recipe': 'sim', 'variant_id': 'spec-none', 'simulated': True}\n"
            "with ResultsStore(results).new_run(plan) as run:\n"
            "    run.finish(RunSummary(measures={'decode_c1': 1.0}))\n"
            "record('run_dir', str(run.path))"
        ),
    ]
    probe = tmp_path / "mini.ipynb"
    nbformat.write(nb, probe)
    out = nbk.execute(
        probe,
        {"results": str(tmp_path / "res")},
        tmp_path / "o" / "x.ipynb",
        progress=False,
        log_output=False,
    )
    assert nbk.read_records(out)["run_dir"].startswith(str(tmp_path / "res"))
    from labkit.store import ResultsError, ResultsStore, attach_file, read_run

    [run_dir] = ResultsStore(tmp_path / "res").run_paths()
    assert (run_dir / "mini.ipynb").read_bytes() == out.read_bytes()
    assert "mini.ipynb" in read_run(run_dir).files and read_run(run_dir).status == "complete"
    with pytest.raises(ResultsError, match="never overwritten"):
        attach_file(run_dir, out, "mini.ipynb")


def test_compare_notebook_compares_two_lanes_and_shows_the_worked_example(tmp_path, committed_record):
    res = tmp_path / "results"
    shutil.copytree(committed_record, res, ignore=shutil.ignore_patterns("TABLES.md", "sim"))
    for none, dspark in ((30.0, 50.0), (30.3, 50.4), (29.8, 49.7)):
        make_sim_run(res, {"decode_c1": none, "decode_c2_agg": 45.0}, spec="none")
        make_sim_run(res, {"decode_c1": dspark, "decode_c2_agg": 45.0}, spec="dspark")
    executed = nbk.execute(
        "compare",
        {
            "results_dir": str(res),
            "plots": False,
            "compare_a": "sim@spec=none",
            "compare_b": "sim/spec-dspark",
            "worked_example": True,  # off by default
        },
        tmp_path / "nb" / "compare-out.ipynb",
        progress=False,
        log_output=False,
    )
    nb = nbformat.read(executed, as_version=4)
    text = "".join(
        "".join(o.get("data", {}).get("text/plain", "")) + "".join(o.get("text", ""))
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    )
    assert "A: sim/spec-none" in text and "Welch t, 3 vs 3 runs" in text
    assert "decode_c1: faster" in text and "decode_c2_agg: equivalent within ±2 %" in text
    # the worked example: the lab note's recorded figures get a range statement, never a test
    assert "A: dsv41-flash-1017-4x-sglang-ep2/spec-dspark" in text
    assert "B's range lies entirely above A's (faster); no test" in text
    # the second worked example: the tools table of results/tiny-vllm and its refused, then forced, comparison
    assert "vllm-bench:median_tpot_ms" in text and "llama-benchy:tg_throughput" in text
    assert "refused: not comparable:" in text and "definition of decode_c1" in text
    assert "A: tiny-vllm/spec-none" in text and "B: tiny-vllm/vllm-bench_c1_in128" in text
