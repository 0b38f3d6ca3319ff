"""The table "The same measures from labkit and from other tools' files": from the stored lab record of one vLLM
CPU boot (results/tiny-vllm: labkit's run and five tools' imported files), a row per lane, each imported figure
converted into the labkit measure it speaks of, its definition numbered in a note; lanes of recipes without
imports (the simulator's) are left out."""

from __future__ import annotations

import shutil

from labkit.report.specs import RowSpec, TableSpec
from labkit.report.tools_table import IMPORTED_MARK, tools_table
from labkit.store import load_results

SPEC = TableSpec(
    id="tools",
    title="tools",
    columns=None,
    rows=(RowSpec("decode c1", measure="decode_c1"), RowSpec("TTFT c1", measure="ttft_c1", decimals=4)),
    axis="tools",
)


def test_each_lane_shows_its_converted_figure_and_its_definition(tmp_path, committed_record):
    root = tmp_path / "results"
    shutil.copytree(committed_record / "tiny-vllm", root / "tiny-vllm")
    shutil.copytree(committed_record / "sim" / "spec-none", root / "sim" / "spec-none")
    docs = load_results(root).docs
    table = tools_table(SPEC, docs)
    frame = table.frame
    assert not any(lane.startswith("sim/") for lane in frame.index)
    assert frame.loc["tiny-vllm/spec-none", "source"] == "labkit"
    vllm = next(d for d in docs.values() if d.variant_id == "vllm-bench_c1_in128")
    tpot = vllm.summary.measures["vllm-bench:median_tpot_ms"] or 0
    assert frame.loc["tiny-vllm/vllm-bench_c1_in128", "decode c1"] == f"{1000 / tpot:,.1f}"
    assert frame.loc["tiny-vllm/vllm-bench_c1_in128", "source"].endswith(IMPORTED_MARK)
    cell = frame.loc["tiny-vllm/vllm-bench_c1_in128", "decode c1: definition"]
    number = cell.split("]")[0] + "]"
    [note] = [n for n in table.notes if n.startswith(number + " ")]
    assert "vllm-bench:median_tpot_ms (1000/x)" in note and "(latency - TTFT) / (N - 1)" in note
    assert (
        frame.loc["tiny-vllm/llama-benchy_c2_pp128_tg128", "decode c1"] == "—"
    )  # c2 speaks of no c1 measure
    assert (
        len({n.split("]")[0] for n in table.notes if n.startswith("[")}) == 12
    )  # five tools and labkit, two measures each


def test_a_labkit_export_imported_back_has_its_own_footnote(tmp_path, committed_record):
    """llama-benchy's definition applied by labkit export is not llama-benchy's measurement: its own note."""
    import json

    from labkit.exchange import export_run, import_file

    root = tmp_path / "results"
    shutil.copytree(committed_record / "tiny-vllm", root / "tiny-vllm")
    labkit_run = next(p.name for p in (root / "tiny-vllm" / "spec-none").iterdir())
    out = tmp_path / "export.json"
    out.write_text(json.dumps(export_run(labkit_run, "llama-benchy", results=root)))
    import_file(out, lane="exported", results=root)
    table = tools_table(SPEC, load_results(root).docs)
    notes = [n for n in table.notes if "llama-benchy:tg_throughput" in n]
    assert len(notes) == 2 and any("@labkit-export" in n and "computed by labkit export" in n for n in notes)
