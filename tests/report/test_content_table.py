"""The table "decode c1 and acceptance by prompt content" (docs/measurement.md, "Prompt content"): stored runs
written through the store into a temp results folder, then the table's rows, exact cells with intervals, the
† marks of a category's flag, its Markdown, and the tables.toml keys that ask for it."""

from __future__ import annotations

import pytest

from labkit import report as rp
from labkit.report.content_table import content_table
from labkit.report.specs import ReportError, load_spec
from labkit.report.tables import FLAG_MARK
from labkit.store import load_results
from tests.support.results import first_table, flagged_run, make_sim_run

TABLE = """
[[table]]
id = "content"
title = "Decode c1 and acceptance by prompt content"
columns = "auto"
content = "auto"
interval = "ci"
drop_empty_rows = true
empty = "no content"
rows = [
    {{ label = "decode c1 (t/s)", measure = "decode_c1", decimals = 1 }},
    {{ label = "τ", measure = "accept_length", decimals = 2 }},
    {{ label = "acceptance", format = "acceptance" }},
    {{ label = "energy", measure = "energy_per_token_decode" }},
    {{ label = "runs", format = "runs" }},
]
{extra}
"""
CODE = (70.0, 74.0, 78.0)


def _run(root, measures, flags=(), spec="dspark"):
    return flagged_run(root, measures, flags, spec)


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    flag = {
        "code": "busy-at-start",
        "window": "decode@code",
        "message": "decode@code: 1 running at the start",
    }
    ids = []
    for i, code in enumerate(CODE):
        ids.append(
            _run(
                root,
                {
                    "decode_c1": 50.0 + i,
                    "accept_per_draft": 4.79,
                    "accept_k": 5,
                    "accept_length": 5.2,
                    "decode_c1@code": code,
                    "accept_length@code": 5.9,
                    "accept_per_draft@code": 4.9,
                    "decode_c1@prose": 20.0,
                    "accept_length@prose": 1.9,
                },
                flags=[flag] if i == 2 else [],
            )
        )
    make_sim_run(root, {"decode_c1": 29.7}, spec="none")  # no content: no rows
    return root, ids


def _table(results, tmp_path, extra=""):
    return first_table(results, TABLE.format(extra=extra), tmp_path)


def test_a_row_per_lane_and_content_with_intervals_and_the_categorys_flag(results, tmp_path):
    root, ids = results
    t = _table(root, tmp_path)
    lane = "simulated stock vLLM + DSpark k5 (sim)"
    assert list(t.frame.index) == [(lane, "synthetic"), (lane, "prose"), (lane, "code")]  # catalogue order
    assert list(t.frame.columns) == ["decode c1 (t/s)", "τ", "acceptance", "runs"]  # energy: empty, dropped
    code, prose, synthetic = (t.frame.loc[(lane, c)] for c in ("code", "prose", "synthetic"))
    # mean 74 ± t(0.975, 2)·4/√3 = 74 ± 9.94; the flag of run 3's decode@code window marks the code row only
    assert code["decode c1 (t/s)"] == f"74.0 [64.1, 83.9] n=3 runs, boots unknown {FLAG_MARK}"
    assert code["τ"] == f"5.90 [5.90, 5.90] n=3 runs, boots unknown {FLAG_MARK}"
    assert code["acceptance"] == f"4.90 of 5 {FLAG_MARK}" and code["runs"] == "3"
    assert prose["decode c1 (t/s)"] == "20.0 [20.0, 20.0] n=3 runs, boots unknown"
    assert prose["acceptance"] == "—"  # no ā stored for prose
    assert synthetic["decode c1 (t/s)"] == "51.0 [48.5, 53.5] n=3 runs, boots unknown"
    assert synthetic["acceptance"] == "4.79 of 5"
    assert [n for n in t.notes if n.startswith(FLAG_MARK)] == [
        f"{FLAG_MARK} {lane}, run {ids[2]}, decode@code: busy-at-start: decode@code: 1 running at the start"
    ]
    assert any(n.startswith("Intervals: mean [low, high]") for n in t.notes)
    md = rp.tables.to_markdown(t)
    header = md.splitlines()[2]
    assert header.split("|")[1].strip() == "lane" and header.split("|")[2].strip() == "content"
    assert "synthetic |" in md and "Runs: 3 (any)." in md


def test_no_content_anywhere_is_the_empty_message(tmp_path):
    root = tmp_path / "results"
    make_sim_run(root, {"decode_c1": 29.7}, spec="none")
    t = _table(root, tmp_path)
    assert t.frame.shape[0] == 0 and "_no content_" in rp.tables.to_markdown(t)


def test_the_shipped_table_and_its_keys(tmp_path):
    _, specs = load_spec()
    spec = next(s for s in specs if s.id == "content")
    assert spec.axis == "content" and spec.interval == "ci" and not spec.is_sweep
    assert content_table(spec, load_results(tmp_path / "none").measures).frame.shape[0] == 0
    for extra, words in [
        ('content = "all"', 'only "auto"'),
        ('content = "auto"\nlanes = "rows"', "takes no lanes"),
    ]:
        (tmp_path / "t.toml").write_text(TABLE.format(extra="").replace('content = "auto"', extra))
        with pytest.raises(ReportError, match=words):
            load_spec(tmp_path / "t.toml")
    (tmp_path / "s.toml").write_text(TABLE.format(extra="").replace('columns = "auto"', 'sweeps = "auto"'))
    with pytest.raises(ReportError, match="sweep table or a content table"):
        load_spec(tmp_path / "s.toml")
