"""The table "TTFT, prefill and decode by depth" (docs/measurement.md, "Context depth"): stored runs written
through the store into a temp results folder, then the table's rows (per depth, uncached before cached), exact
cells with intervals, the per-depth gain on the cached row only, the † marks of one depth window's flag (on
that depth's rows only), and the tables.toml keys."""

from __future__ import annotations

import pytest

from labkit import report as rp
from labkit.report.depth_table import depth_table
from labkit.report.specs import ReportError, load_spec
from labkit.report.tables import FLAG_MARK
from labkit.store import load_results
from tests.support.results import first_table, flagged_run, make_sim_run

TABLE = """
[[table]]
id = "depths"
title = "by depth"
columns = "auto"
depths = "auto"
interval = "ci"
drop_empty_rows = true
empty = "no depths"
rows = [
    {{ label = "TTFT (s)", measure = "ttft", decimals = 3 }},
    {{ label = "hits", measure = "hit", decimals = 0 }},
    {{ label = "gain", measure = "ttft_gain", decimals = 1 }},
    {{ label = "energy", measure = "energy" }},
]
{extra}
"""
CACHED = (0.010, 0.012, 0.014)


@pytest.fixture
def results(tmp_path):
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


def _table(results, tmp_path, extra=""):
    return first_table(results, TABLE.format(extra=extra), tmp_path)


def test_a_row_per_lane_depth_and_state_with_intervals_and_the_windows_flag(results, tmp_path):
    root, ids = results
    t = _table(root, tmp_path)
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


def test_no_depths_anywhere_is_the_empty_message(tmp_path):
    root = tmp_path / "results"
    make_sim_run(root, {"decode_c1": 29.7}, spec="none")
    t = _table(root, tmp_path)
    assert t.frame.shape[0] == 0 and "_no depths_" in rp.tables.to_markdown(t)


def test_the_shipped_table_and_its_keys(tmp_path):
    _, specs = load_spec()
    spec = next(s for s in specs if s.id == "depths")
    assert spec.axis == "depths" and not spec.is_sweep
    assert depth_table(spec, load_results(tmp_path / "none").measures).frame.shape[0] == 0
    for extra, words in [
        ('depths = "all"', 'only "auto"'),
        ('depths = "auto"\nlanes = "rows"', "takes no lanes"),
        ('depths = "auto"\nturns = "auto"', "one axis: turns and depths are both set"),
    ]:
        (tmp_path / "t.toml").write_text(TABLE.format(extra="").replace('depths = "auto"', extra))
        with pytest.raises(ReportError, match=words):
            load_spec(tmp_path / "t.toml")
