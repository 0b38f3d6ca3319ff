"""The table "TTFT by turn" (docs/measurement.md, "Agentic sessions", "Idle turns"): stored runs written through
the store into a temp results folder, then the table's rows (turns, then idle lengths), exact cells with
intervals, the † marks of an agentic window's flag (on the turn rows only), and the tables.toml keys."""

from __future__ import annotations

import pytest

from labkit import report as rp
from labkit.report.specs import ReportError, load_spec
from labkit.report.tables import FLAG_MARK
from labkit.report.turn_table import turn_table
from labkit.store import load_results
from tests.support.results import first_table, flagged_run, make_sim_run

TABLE = """
[[table]]
id = "turns"
title = "TTFT by turn"
columns = "auto"
turns = "auto"
interval = "ci"
drop_empty_rows = true
empty = "no turns"
rows = [
    {{ label = "TTFT (s)", measure = "ttft", decimals = 3 }},
    {{ label = "hits", measure = "hit", decimals = 0 }},
    {{ label = "expected", measure = "hit_expected", decimals = 0 }},
    {{ label = "slowdown", measure = "slowdown", decimals = 2 }},
    {{ label = "energy", measure = "energy" }},
]
{extra}
"""
TTFT2 = (0.10, 0.12, 0.14)


@pytest.fixture
def results(tmp_path):
    root = tmp_path / "results"
    flag = {
        "code": "foreign-traffic",
        "window": "agentic",
        "message": "agentic: 1 request from another client",
    }
    ids = []
    for i, ttft in enumerate(TTFT2):
        figures = {
            "decode_c1": 50.0,
            "agentic_ttft_t1": 0.05,
            "agentic_ttft_t2": ttft,
            "agentic_hit_t2": 512.0,
            "agentic_hit_expected_t2": 512,
            "idle_60_ttft": 0.2,
            "idle_60_slowdown": 1.5,
        }
        ids.append(flagged_run(root, figures, flags=[flag] if i == 1 else []))
    make_sim_run(root, {"decode_c1": 29.7}, spec="dspark")  # no sessions: no rows
    return root, ids


def _table(results, tmp_path, extra=""):
    return first_table(results, TABLE.format(extra=extra), tmp_path)


def test_a_row_per_lane_and_turn_then_idle_with_intervals_and_the_windows_flag(results, tmp_path):
    root, ids = results
    t = _table(root, tmp_path)
    lane = next(iter(t.frame.index))[0]
    assert list(t.frame.index) == [(lane, "turn 1"), (lane, "turn 2"), (lane, "idle 60 s")]
    assert list(t.frame.columns) == ["TTFT (s)", "hits", "expected", "slowdown"]  # energy: empty, dropped
    one, two, idle = (t.frame.loc[(lane, k)] for k in ("turn 1", "turn 2", "idle 60 s"))
    # mean 0.12 ± t(0.975, 2)·0.02/√3 = 0.12 ± 0.0497; run 2's agentic flag marks the turn rows, not the idle one
    assert two["TTFT (s)"] == f"0.120 [0.070, 0.170] n=3 runs, boots unknown {FLAG_MARK}"
    assert two["hits"] == f"512 [512, 512] n=3 runs, boots unknown {FLAG_MARK}"
    assert one["hits"] == "—" and one["slowdown"] == "—"
    assert idle["TTFT (s)"] == "0.200 [0.200, 0.200] n=3 runs, boots unknown"
    assert idle["slowdown"] == "1.50 [1.50, 1.50] n=3 runs, boots unknown" and idle["hits"] == "—"
    assert [n for n in t.notes if n.startswith(FLAG_MARK)] == [
        f"{FLAG_MARK} {lane}, run {ids[1]}, agentic: foreign-traffic: agentic: 1 request from another client"
    ]
    md = rp.tables.to_markdown(t)
    assert md.splitlines()[2].split("|")[2].strip() == "turn" and "idle 60 s |" in md


def test_no_sessions_anywhere_is_the_empty_message(tmp_path):
    root = tmp_path / "results"
    make_sim_run(root, {"decode_c1": 29.7}, spec="none")
    t = _table(root, tmp_path)
    assert t.frame.shape[0] == 0 and "_no turns_" in rp.tables.to_markdown(t)


def test_the_shipped_table_and_its_keys(tmp_path):
    _, specs = load_spec()
    spec = next(s for s in specs if s.id == "turns")
    assert spec.axis == "turns" and not spec.is_sweep
    assert turn_table(spec, load_results(tmp_path / "none").measures).frame.shape[0] == 0
    for extra, words in [
        ('turns = "all"', 'only "auto"'),
        ('turns = "auto"\nlanes = "rows"', "takes no lanes"),
        ('turns = "auto"\ncontent = "auto"', "one axis: content and turns are both set"),
    ]:
        (tmp_path / "t.toml").write_text(TABLE.format(extra="").replace('turns = "auto"', extra))
        with pytest.raises(ReportError, match=words):
            load_spec(tmp_path / "t.toml")
