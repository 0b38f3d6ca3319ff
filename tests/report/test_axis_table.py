"""The axis tables (labkit/report/axis_table.py), each axis declared in tables.toml: stored runs written through
the store into a temp results folder, then each table's rows, exact cells with intervals, the † marks of a
window's flag on the rows it covers, its Markdown, and the tables.toml keys that ask for it.

- content (docs/measurement.md, "Prompt content"): a row per lane and content, the category's flag on its row;
- turn ("Agentic sessions", "Idle turns"): session turns, then idle lengths, an agentic flag on the turn rows;
- depth ("Context depth"): per depth uncached before cached, the per-depth gain on the cached row only, one
  depth window's flag on that depth's rows only.
"""

from __future__ import annotations

import re

import pytest

from labkit import report as rp
from labkit.report.axis_table import axis_table
from labkit.report.specs import ReportError, load_spec
from labkit.report.tables import FLAG_MARK
from labkit.store import load_results
from tests.support.results import first_table, flagged_run, make_sim_run

CONTENT_TABLE = """
[[table]]
id = "content"
title = "Decode c1 and acceptance by prompt content"
columns = "auto"
axis = "content"
interval = "ci"
drop_empty_rows = true
empty = "no content"
rows = [
    { label = "decode c1 (t/s)", measure = "decode_c1", decimals = 1 },
    { label = "τ", measure = "accept_length", decimals = 2 },
    { label = "acceptance", format = "acceptance" },
    { label = "energy", measure = "energy_per_token_decode" },
    { label = "runs", format = "runs" },
]
"""
CODE = (70.0, 74.0, 78.0)


def _run(root, measures, flags=(), spec="dspark"):
    return flagged_run(root, measures, flags, spec)


@pytest.fixture
def content_results(tmp_path):
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


def test_a_row_per_lane_and_content_with_intervals_and_the_categorys_flag(content_results, tmp_path):
    root, ids = content_results
    t = first_table(root, CONTENT_TABLE, tmp_path)
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


TURN_TABLE = """
[[table]]
id = "turns"
title = "TTFT by turn"
columns = "auto"
axis = "turn"
interval = "ci"
drop_empty_rows = true
empty = "no turns"
rows = [
    { label = "TTFT (s)", measure = "ttft", decimals = 3 },
    { label = "hits", measure = "hit", decimals = 0 },
    { label = "expected", measure = "hit_expected", decimals = 0 },
    { label = "slowdown", measure = "slowdown", decimals = 2 },
    { label = "energy", measure = "energy" },
]
"""
TTFT2 = (0.10, 0.12, 0.14)


@pytest.fixture
def turn_results(tmp_path):
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


def test_a_row_per_lane_and_turn_then_idle_with_intervals_and_the_windows_flag(turn_results, tmp_path):
    root, ids = turn_results
    t = first_table(root, TURN_TABLE, tmp_path)
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


DEPTH_TABLE = """
[[table]]
id = "depths"
title = "by depth"
columns = "auto"
axis = "depth"
interval = "ci"
drop_empty_rows = true
empty = "no depths"
rows = [
    { label = "TTFT (s)", measure = "ttft", decimals = 3 },
    { label = "hits", measure = "hit", decimals = 0 },
    { label = "gain", measure = "ttft_gain", decimals = 1 },
    { label = "energy", measure = "energy" },
]
"""
CACHED = (0.010, 0.012, 0.014)


@pytest.fixture
def depth_results(tmp_path):
    root = tmp_path / "results"
    flag = {"code": "not-drained", "window": "depth_8192", "message": "depth_8192: the engine did not drain"}
    ids = []
    for i, cached in enumerate(CACHED):
        figures = {
            "decode_c1": 50.0,
            "depth_0_ttft": 0.005,
            "depth_8192_ttft": 0.5,
            "depth_8192_hit": 0.0,
            "depth_8192_ttft_cached": cached,
            "depth_8192_hit_cached": 8192.0,
            "depth_8192_ttft_gain": 0.5 / cached,
            "depth_hit_agreement": 1.0,
        }
        ids.append(flagged_run(root, figures, flags=[flag] if i == 1 else []))
    make_sim_run(root, {"decode_c1": 29.7}, spec="dspark")  # no depths: no rows
    return root, ids


def test_a_row_per_lane_depth_and_state_with_intervals_and_the_windows_flag(depth_results, tmp_path):
    root, ids = depth_results
    t = first_table(root, DEPTH_TABLE, tmp_path)
    lane = next(iter(t.frame.index))[0]
    assert list(t.frame.index) == [(lane, "0 uncached"), (lane, "8192 uncached"), (lane, "8192 cached")]
    assert list(t.frame.columns) == ["TTFT (s)", "hits", "gain"]  # energy: empty, dropped
    zero, uncached, cached = (t.frame.loc[(lane, k)] for k in ("0 uncached", "8192 uncached", "8192 cached"))
    # mean 0.012 ± t(0.975, 2)·0.002/√3 = 0.012 ± 0.00497; run 2's depth_8192 flag marks that depth's rows only
    assert cached["TTFT (s)"] == f"0.012 [0.007, 0.017] n=3 runs, boots unknown {FLAG_MARK}"
    assert cached["hits"] == f"8,192 [8,192, 8,192] n=3 runs, boots unknown {FLAG_MARK}"
    assert uncached["hits"] == f"0 [0, 0] n=3 runs, boots unknown {FLAG_MARK}"
    assert uncached["gain"] == "—" and cached["gain"].startswith("42.") and zero["hits"] == "—"
    assert zero["TTFT (s)"] == "0.005 [0.005, 0.005] n=3 runs, boots unknown"
    assert [n for n in t.notes if n.startswith(FLAG_MARK)] == [
        f"{FLAG_MARK} {lane}, run {ids[1]}, depth_8192: not-drained: depth_8192: the engine did not drain"
    ]
    assert rp.tables.to_markdown(t).splitlines()[2].split("|")[2].strip() == "depth"


@pytest.mark.parametrize(
    ("table", "empty"), [(CONTENT_TABLE, "no content"), (TURN_TABLE, "no turns"), (DEPTH_TABLE, "no depths")]
)
def test_a_lane_without_the_axis_anywhere_is_the_empty_message(table, empty, tmp_path):
    root = tmp_path / "results"
    make_sim_run(root, {"decode_c1": 29.7}, spec="none")
    t = first_table(root, table, tmp_path)
    assert t.frame.shape[0] == 0 and f"_{empty}_" in rp.tables.to_markdown(t)


@pytest.mark.parametrize(
    ("table_id", "axis"), [("content", "content"), ("turns", "turn"), ("depths", "depth")]
)
def test_the_shipped_axis_tables_declare_their_axis(table_id, axis, tmp_path):
    _, specs = load_spec()
    spec = next(s for s in specs if s.id == table_id)
    assert spec.axis == axis and spec.interval == "ci" and not spec.is_sweep
    assert axis_table(spec, load_results(tmp_path / "none").measures).frame.shape[0] == 0


@pytest.mark.parametrize(
    ("declared", "words"),
    [
        ('axis = "all"', "axis = 'all': one of \"content\""),
        ('axis = "content"\nlanes = "rows"', "takes no lanes"),
        ('axis = "turn"\ntools = "auto"', "an axis table or the tools table, not both"),
        ('turns = "auto"', 'turns = "auto" is written axis = "turn" now'),
        ('depths = "auto"', 'depths = "auto" is written axis = "depth" now'),
    ],
)
def test_an_axis_is_declared_once_and_by_name(declared, words, tmp_path):
    (tmp_path / "t.toml").write_text(CONTENT_TABLE.replace('axis = "content"', declared))
    with pytest.raises(ReportError, match=re.escape(words)):
        load_spec(tmp_path / "t.toml")


def test_an_axis_table_is_no_sweep_table(tmp_path):
    (tmp_path / "s.toml").write_text(CONTENT_TABLE.replace('columns = "auto"', 'sweeps = "auto"'))
    with pytest.raises(ReportError, match="sweep table or a content table"):
        load_spec(tmp_path / "s.toml")
