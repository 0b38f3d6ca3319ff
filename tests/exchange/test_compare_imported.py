"""`labkit compare` with imported runs: a labkit lane against another tool's figures of the same measures is
refused naming both definitions, goes ahead with --force on the converted figures, and two imports of one
tool's definition compare without a refusal. The measured side is a stored simulator lane of results/."""

from __future__ import annotations

import shutil

import pytest

from labkit.cli.app import main
from labkit.exchange import import_file
from labkit.lab import compare
from labkit.report import CompareError
from labkit.store import load_results
from tests.support.imports import IMPORTS, edited

C1 = IMPORTS / "vllm-bench-c1.json"
SIM = "sim/spec-none"


@pytest.fixture
def results(tmp_path, committed_record):
    """A results folder with the stored sim lane spec-none and the recorded vllm bench serve file imported."""
    root = tmp_path / "results"
    shutil.copytree(committed_record / SIM, root / SIM)
    import_file(C1, lane="bench-tiny", results=root)
    return root


def test_a_labkit_lane_and_an_imported_one_are_refused_naming_both_definitions(results):
    with pytest.raises(CompareError) as e:
        compare(SIM, "bench-tiny", results=results)
    text = str(e.value)
    assert "definition of decode_c1" in text and "definition of ttft_c1" in text
    assert "labkit: median over warm c1 turns; decode: (N - n_first) / (t_last - t_first)" in text
    assert (
        "vllm-bench:median_tpot_ms: vllm bench serve, version unknown: median over completed requests of TPOT"
        in text
    )
    assert "--force" in text


def test_forced_the_comparison_uses_the_converted_figures_and_lists_the_import(results):
    c = compare(SIM, "bench-tiny", results=results, force=True)
    doc = load_results(results).docs
    imported = next(d for d in doc.values() if d.source == "import")
    rows = {r.measure: r for r in c.rows}
    tpot = imported.summary.measures["vllm-bench:median_tpot_ms"] or 0
    assert rows["decode_c1"].mean_b == pytest.approx(1000 / tpot)
    facts = {i.fact: i for i in c.gate.items}
    assert "external run (vllm bench serve, version unknown)" in " ".join(facts["source"].b)
    assert not facts["measurement plan"].blocking  # another tool's plan: the definitions block, not the plan


def test_two_imports_of_the_same_definition_compare_without_force(results, tmp_path):
    other = edited(C1, tmp_path / "again.json", {"median_tpot_ms": 2.5, "date": "20261205-090000"})
    import_file(other, lane="bench-tiny-2", results=results)
    c = compare("bench-tiny", "bench-tiny-2", results=results, measures=["decode_c1"])
    assert not c.gate.blocked
    assert [r.measure for r in c.rows] == ["decode_c1"]


def test_the_cli_refusal_is_one_line_naming_both(results, capsys):
    assert main(["compare", SIM, "bench-tiny", "--results", str(results)]) == 1
    err = capsys.readouterr().err
    assert "definition of decode_c1" in err and "vllm-bench:median_tpot_ms" in err
