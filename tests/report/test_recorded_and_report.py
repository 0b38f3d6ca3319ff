import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from labkit import report as rp
from labkit.report.format import EN_DASH
from labkit.store import import_figures, load_results, read_run
from labkit.store.recorded import RecordedError, parse_figures
from tests.support.results import REPO, make_sim_run

FIGURES = REPO / "results" / "recorded.toml"


def labkit(*args, cwd=None, env=None):
    import os

    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=full,
        timeout=120,
    )


@pytest.fixture()
def results_copy(lab_record):
    """A temp copy of the committed results/ (tests never write into results/)."""
    return lab_record


def test_import_is_idempotent_and_honest(tmp_path):
    first = import_figures(FIGURES, tmp_path)
    assert [o.action for o in first] == ["created"] * 5
    second = import_figures(FIGURES, tmp_path)
    assert [o.action for o in second] == ["unchanged"] * 5
    for o in first:
        doc = read_run(o.path)
        assert doc.source == "recorded" and doc.status == "complete"
        assert doc.provenance.raw["note"] == "recorded in the lane's NOTE.md, 2026-10-23"
        assert doc.provenance.raw["raw_samples"] is False
        assert not (o.path / "requests.csv").exists()
        assert doc.summary.n_ok == 0
    prod = read_run(next(o.path for o in first if o.key == "baseline-sglang-production"))
    assert prod.summary.measures["decode_c1"] is None  # a range, no median
    assert prod.measure_info["decode_c1"].raw == {"min": 47.8, "max": 50.7, "kind": "recorded range"}
    assert (prod.measure_info["decode_c1"].min, prod.measure_info["decode_c1"].max) == (47.8, 50.7)
    spec = read_run(next(o.path for o in first if o.key == "dspark-vllm"))
    assert "3.79" in spec.measure_info["accept_per_draft"].raw["note"]


def test_committed_recorded_runs_match_the_figures_file(lab_record):
    """The committed runs were made by the importer from recorded.toml: importing again changes nothing."""
    entries = {e.key: e for e in parse_figures(lab_record / "recorded.toml")}
    data = load_results(lab_record)
    recorded = {
        d.recorded.key: d.recorded for d in data.docs.values() if d.recorded and d.source == "recorded"
    }
    assert set(recorded) == set(entries)
    for key, entry in entries.items():
        assert recorded[key].fingerprint == entry.fingerprint()


def test_reimport_after_a_recipe_gained_an_axis_changes_nothing(lab_record, tmp_path, monkeypatch):
    """A recorded run keeps the variant it was recorded under: after a recipe gains an axis with a default,
    its variant id today is longer, and re-importing must find the stored run, not store a second copy."""
    recipes = Path(shutil.copytree(REPO / "recipes", tmp_path / "recipes"))
    for name in ("dsv41-flash-1017-4x-vllm032", "dsv41-flash-1017-4x-sglang-ep2"):
        toml = recipes / name / "recipe.toml"
        text = toml.read_text()
        assert text.count("defaults = { spec = ") == 1
        toml.write_text(
            text.replace("defaults = { spec = ", 'defaults = { kv = "auto", spec = ')
            + '\n[variants.kv.auto]\n\n[variants.kv.fp8]\nengine.args."--kv-cache-dtype" = "fp8"\n'
        )
    monkeypatch.setenv("LABKIT_RECIPES", str(recipes))
    before = sorted(lab_record.rglob("run.json"))
    stamps = {p: p.read_bytes() for p in before}
    outcomes = import_figures(lab_record / "recorded.toml", lab_record)
    assert [o.action for o in outcomes] == ["unchanged"] * 5
    assert sorted(lab_record.rglob("run.json")) == before
    assert all(p.read_bytes() == stamps[p] for p in before)  # nothing rewritten either


def test_changed_figure_is_refused_not_overwritten(tmp_path):
    import_figures(FIGURES, tmp_path / "res")
    changed = tmp_path / "recorded.toml"
    changed.write_text(FIGURES.read_text().replace("decode_c1 = 29.7", "decode_c1 = 31.0"))
    with pytest.raises(RecordedError, match="figures differ"):
        import_figures(changed, tmp_path / "res")
    doc = read_run(
        tmp_path
        / "res/dsv41-flash-1017-4x-vllm032/spec-none_staging-nas/20261023-recorded-baseline-vllm-nospec"
    )
    assert doc.summary.measures["decode_c1"] == 29.7


@pytest.mark.parametrize(
    "edit,match",
    [
        (("decode_c1 = 29.7", 'decode_c1 = "fast"'), "decode_c1: expected a number"),
        (("decode_c1 = { min = 47.8, max = 50.7 }", "decode_c1 = { min = 47.8 }"), "needs both min and max"),
        (
            (
                'variants = { spec = "none", staging = "nas" }',
                'variants = { spec = "nonsense", staging = "nas" }',
            ),
            "no variant 'nonsense'",
        ),
    ],
)
def test_bad_figures_name_the_entry_and_write_nothing(tmp_path, edit, match):
    bad = tmp_path / "recorded.toml"
    bad.write_text(FIGURES.read_text().replace(*edit, 1))
    with pytest.raises(RecordedError, match=match):
        import_figures(bad, tmp_path / "res")
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").rglob("run.json"))


def test_generated_tables_contain_the_lab_note_figures(lab_record):
    md = rp.generate(lab_record, write=False, plots=False).markdown
    for text in [
        "29.7 (20.0 cold)",
        f"47.8{EN_DASH}50.7",
        "45.6",
        f"64.2{EN_DASH}68.3",
        "~750",
        f"2,800{EN_DASH}3,127",
        "8.73M tokens @131072",
        "52.9 (25.5 cold)",
        "66.4",
        "605",
        "4.79 of 5",
        "7.07M tokens",
        "+258 MB per short completion",
        "0 MB",
        "3,957",
        "59.7",
        "Engram on the NAS",
        "Engram staged locally",
        "setup",
        "prefill (12.6K unique prompt, t/s)",
        "shared-NFS reads during a run",
    ]:
        assert text in md, text
    tables = {t.id: t for t in rp.generate(lab_record, write=False, plots=False).tables}
    base = tables["baseline"].frame
    assert base.loc["prefill (~4K prompt, t/s)"].tolist() == ["~750", f"2,800{EN_DASH}3,127"]
    assert base.loc["KV pool"].tolist() == ["8.73M tokens @131072", "\u2014"]
    ds = tables["dspark"].frame
    assert ds.loc["acceptance"].tolist() == ["4.79 of 5", "\u2014", "\u2014"]
    assert ds.loc["decode c2 (aggregate t/s)"].tolist() == ["66.4", "45.6", f"64.2{EN_DASH}68.3"]
    st = tables["staging"].frame
    assert st.loc["Engram on the NAS"].tolist() == ["750", "+258 MB per short completion", "52.9"]
    assert st.loc["Engram staged locally"].tolist() == ["3,957", "0 MB", "59.7"]


def test_committed_tables_md_is_current(lab_record):
    ok, diff = rp.check(lab_record)
    assert ok, diff


def test_report_check_cli_passes_then_fails_after_hand_edit(results_copy):
    ok = labkit("report", "--check", "--results", str(results_copy))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    tables = results_copy / "TABLES.md"
    tables.write_text(tables.read_text(encoding="utf-8").replace("66.4", "67.4"), encoding="utf-8")
    bad = labkit("report", "--check", "--results", str(results_copy))
    assert bad.returncode == 1
    assert "-| decode c2" in bad.stdout and "67.4" in bad.stdout and "+| decode c2" in bad.stdout
    assert "drifted" in bad.stderr
    fixed = labkit("report", "--results", str(results_copy))
    assert fixed.returncode == 0, fixed.stderr
    assert (results_copy / "plots" / "measures.png").stat().st_size > 1000
    assert labkit("report", "--check", "--results", str(results_copy)).returncode == 0


def test_new_run_makes_check_fail_until_regenerated(results_copy):
    shutil.rmtree(results_copy / "sim", ignore_errors=True)  # only the run made here is measured
    shutil.rmtree(results_copy / "tiny-vllm", ignore_errors=True)
    make_sim_run(
        results_copy,
        {
            "decode_c1": 30.1,
            "decode_c1_cold": 18.2,
            "decode_c2_agg": 44.0,
            "prefill_4096": 702.0,
            "kv_pool_tokens": 1_000_000,
            "kv_pool_context": 32768,
        },
    )
    ok, diff = rp.check(results_copy)
    assert not ok and "(sim)" in diff
    rep = rp.generate(results_copy, plots=True)
    measured = next(t for t in rep.tables if t.id == "measured")
    [title] = measured.frame.columns
    assert title == "simulated stock vLLM (sim)"
    assert measured.frame.loc["decode c1 (t/s)", title] == "30.1 (18.2 cold)"
    assert measured.frame.loc["prefill (4,096 prompt, t/s)", title] == "702"
    assert measured.frame.loc["runs", title] == "1"
    assert any(p.name.startswith("tokens-sim-") for p in rep.plots)
    assert rp.check(results_copy)[0]


def test_import_note_cli(tmp_path):
    out = labkit("import-note", "--results", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("created") == 5
    again = labkit("import-note", "--results", str(tmp_path))
    assert again.stdout.count("unchanged") == 5


def test_report_skips_incomplete_runs(results_copy):
    from labkit.store import ResultsStore
    from tests.support.results import sim_plan

    run = ResultsStore(results_copy).new_run(sim_plan())
    run.update(summary={"measures": {"decode_c1": 999.0}})
    assert rp.check(results_copy)[0]  # an unfinished run adds nothing
    doc = json.loads((run.path / "run.json").read_text())
    assert doc["status"] == "incomplete"
