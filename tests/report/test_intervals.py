"""Statistics over runs (docs/measurement.md, "Intervals over runs"): the Student-t quantile against
textbook values, RunStats on hand-computed examples, the fewer-than-3-runs rule, the unit of a run (boots,
runs on one boot, runs) and both interval forms rendered from runs stored in a temp results folder."""

import math

import pytest

from labkit import report as rp
from labkit.report.format import EN_DASH, PLUS_MINUS
from labkit.store import ResultsStore
from tests.support.results import requests_for, sim_plan, stored_run

# --- the t quantile --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "df,expected",
    [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (10, 2.228), (29, 2.045), (120, 1.980)],
)
def test_t_quantile_matches_the_table(df, expected):
    assert rp.stats.t_ppf(0.975, df) == pytest.approx(expected, abs=5e-4)


def test_t_quantile_to_more_digits_and_other_levels():
    assert rp.stats.t_ppf(0.975, 1) == pytest.approx(12.706204736, abs=1e-8)  # tan(0.475 pi)
    assert rp.stats.t_ppf(0.975, 1) == pytest.approx(math.tan(math.pi * 0.475), abs=1e-8)
    assert rp.stats.t_ppf(0.975, 2) == pytest.approx(4.302652730, abs=1e-8)
    assert rp.stats.t_ppf(0.975, 4) == pytest.approx(2.776445105, abs=1e-8)
    assert rp.stats.t_ppf(0.975, 29) == pytest.approx(2.045229642, abs=1e-8)
    assert rp.stats.t_ppf(0.995, 5) == pytest.approx(4.032142984, abs=1e-8)
    assert rp.stats.t_ppf(0.9, 3) == pytest.approx(1.637744354, abs=1e-8)
    assert rp.stats.t_ppf(0.025, 4) == pytest.approx(-2.776445105, abs=1e-8)  # symmetric
    assert rp.stats.t_ppf(0.5, 7) == pytest.approx(0.0, abs=1e-10)


@pytest.mark.parametrize("df", [1e4, 1e6, 1e7, 1e9])
def test_t_quantile_tends_to_the_normal(df):
    assert rp.stats.t_ppf(0.975, df) == pytest.approx(1.959964, abs=3e-4)
    assert round(rp.stats.t_ppf(0.975, df), 3) == 1.960


def test_t_cdf_and_bad_arguments():
    assert rp.stats.t_cdf(0.0, 3) == pytest.approx(0.5)
    assert rp.stats.t_cdf(12.706204736, 1) == pytest.approx(0.975, abs=1e-9)
    assert rp.stats.t_cdf(-2.776445105, 4) == pytest.approx(0.025, abs=1e-9)
    for p, df in [(0.0, 3), (1.0, 3), (0.9, 0)]:
        with pytest.raises(ValueError):
            rp.stats.t_ppf(p, df)


# --- RunStats --------------------------------------------------------------------------------------------


def test_interval_on_a_hand_computed_example():
    # mean 50, s = 2, s/sqrt(3) = 1.1547, t(0.975, 2) = 4.30265: half width 4.9683
    rs = rp.stats.run_stats([48.0, 52.0, 50.0], unit="boots")
    assert (rs.n, rs.median, rs.mean) == (3, 50.0, 50.0)
    assert rs.half_width == pytest.approx(4.30265273 * 2 / math.sqrt(3), rel=1e-7)
    assert rs.lo == pytest.approx(45.0317, abs=1e-4) and rs.hi == pytest.approx(54.9683, abs=1e-4)
    assert rs.cv == pytest.approx(0.04)
    assert rs.method == "Student-t on 3 run means, 95 %" and rs.unit == "boots"


def test_interval_five_runs_and_cv():
    # mean 12, s = sqrt(2.5) = 1.5811, s/sqrt(5) = 0.70711, t(0.975, 4) = 2.77645: half width 1.9632
    rs = rp.stats.run_stats([10.0, 12.0, 11.0, 13.0, 14.0])
    assert rs.mean == 12.0 and rs.median == 12.0
    assert rs.half_width == pytest.approx(1.9632, abs=1e-4)
    assert rs.cv == pytest.approx(math.sqrt(2.5) / 12.0)
    assert rs.unit == "runs"


def test_cv_of_identical_runs_is_zero_and_of_a_zero_mean_is_none():
    rs = rp.stats.run_stats([30.0, 30.0, 30.0])
    assert rs.cv == 0.0 and rs.lo == rs.hi == 30.0
    assert rp.stats.run_stats([-1.0, 0.0, 1.0]).cv is None


@pytest.mark.parametrize("values", [[], [47.8], [47.8, 50.7], [47.8, float("nan"), 50.7, None]])
def test_no_interval_from_fewer_than_three_runs(values):
    rs = rp.stats.run_stats(values)
    assert rs.lo is None and rs.hi is None and rs.half_width is None
    assert rs.n == len([v for v in values if v is not None and not math.isnan(v)])
    assert rs.n < rp.stats.MIN_INTERVAL_RUNS
    assert "no interval" in rs.method or rs.n == 0
    if rs.n == 2:
        assert rs.median == rs.mean == pytest.approx(49.25) and rs.cv is not None
    if rs.n == 1:
        assert rs.cv is None


# --- units: boots vs runs on one boot --------------------------------------------------------------------


def test_boot_of_reads_the_run_json_facts():
    boot_of = lambda doc: rp.stats.boot_of(stored_run(doc))  # noqa: E731
    assert boot_of({"run_id": "a", "provenance": {"cold_expected": True}}) == "a"
    assert boot_of({"run_id": "b", "boot_run": "a", "provenance": {"cold_expected": False}}) == "a"
    assert boot_of({"run_id": "c", "provenance": {"cold_expected": False}}) is None
    assert boot_of({"run_id": "d", "source": "recorded", "provenance": {}}) is None


def test_unit_of_runs():
    assert rp.stats.unit_of(["a", "b", "c"], {"a": "a", "b": "b", "c": "c"}) == "boots"
    assert rp.stats.unit_of(["a", "b", "c"], {"a": "a", "b": "a", "c": "a"}) == "runs on one boot"
    assert (
        rp.stats.unit_of(["a", "b", "c", "d"], {"a": "a", "b": "a", "c": "c", "d": "c"}) == "runs on 2 boots"
    )
    assert rp.stats.unit_of(["a", "b"], {"a": "a", "b": None}) == "runs"  # one run does not say
    assert rp.stats.unit_of(["a", "b"], None) == "runs"


# --- tables from stored runs -----------------------------------------------------------------------------


def store_run(root, run_id, measures, spec="none", cold=False, boot_run=None):
    """A complete sim run written through the store, with the boot facts a real run records."""
    extra = {"boot_run": boot_run} if boot_run else {}
    with ResultsStore(root).new_run(sim_plan(spec), run_id=run_id, **extra) as run:
        run.write_requests(requests_for(run.run_id, tps=measures["decode_c1"]))
        run.finish(
            {"measures": dict(measures), "n_ok": 4},
            boot={"kv_pool_tokens": 1000},
            provenance={"harness": "test", "cold_expected": cold},
        )
    return run.path


TABLES = """
title = "T"

[[table]]
id = "m"
title = "M"
columns = "auto"
source = "measured"
{interval}
rows = [
    {{ label = "decode c1", measure = "decode_c1", cold = "decode_c1_cold" }},
    {{ label = "decode c1 ci", measure = "decode_c1", interval = "ci" }},
    {{ label = "decode c2", measure = "decode_c2_agg", interval = "range" }},
    {{ label = "runs", format = "runs" }},
]
"""


@pytest.fixture()
def stored(tmp_path):
    root = tmp_path / "results"
    # spec-none: one boot, three runs on it (the first booted the lane and has the cold turn)
    store_run(
        root,
        "20261201T000001Z-aaaaa1",
        {"decode_c1": 48.0, "decode_c1_cold": 20.0, "decode_c2_agg": 90.0},
        cold=True,
    )
    for i, v in ((2, 52.0), (3, 50.0)):
        store_run(
            root,
            f"20261201T00000{i}Z-aaaaa{i}",
            {"decode_c1": v, "decode_c2_agg": 92.0},
            boot_run="20261201T000001Z-aaaaa1",
        )
    # spec-dspark: two runs, each after its own boot: too few for an interval
    for i, v in ((4, 60.0), (5, 62.0)):
        store_run(
            root,
            f"20261201T00000{i}Z-aaaaa{i}",
            {"decode_c1": v, "decode_c2_agg": 99.0},
            spec="dspark",
            cold=True,
        )
    return root


def _tables(root, interval):
    (root / "tables.toml").write_text(TABLES.format(interval=interval), encoding="utf-8")
    rep = rp.generate(root, write=False, plots=False)
    [table] = rep.tables
    return table, rep.markdown


def test_pm_and_ci_forms_from_stored_runs(stored):
    table, md = _tables(stored, 'interval = "pm"')
    lanes = {lane.variant: lane for lane in table.lanes}
    none_col, dspark_col = lanes["spec-none"].title, lanes["spec-dspark"].title
    f = table.frame
    # beside each interval, what its runs are: three runs on the one boot of spec-none
    assert f.loc["decode c1", none_col] == f"50.0 {PLUS_MINUS} 5.0 n=3 runs, 1 boot (20.0 cold)"
    assert f.loc["decode c1 ci", none_col] == "50.0 [45.0, 55.0] n=3 runs, 1 boot"
    assert f.loc["decode c2", none_col] == f"92.0 (90.0{EN_DASH}92.0)"  # the row keeps the range form
    # two runs: never an interval, the range form with its n
    assert f.loc["decode c1", dspark_col] == f"61.0 (60.0{EN_DASH}62.0) n=2"
    assert f.loc["decode c1 ci", dspark_col] == f"61.0 (60.0{EN_DASH}62.0) n=2"
    assert f.loc["runs", none_col] == "3" and f.loc["runs", dspark_col] == "2"
    assert lanes["spec-none"].unit == "runs on one boot" and lanes["spec-dspark"].unit == "boots"
    [note] = table.notes
    assert "95 % Student-t" in note and "fewer than 3 runs" in note and "n=2" in note
    assert '"n=\u2026 runs, 1 boot": several runs on one engine, so only run-to-run variation' in note
    assert '"n=\u2026 boots": each run booted its lane' in note and "boots unknown" not in note
    assert note in md and f"50.0 {PLUS_MINUS} 5.0 n=3 runs, 1 boot (20.0 cold)" in md


def test_runs_that_do_not_say_their_boot_are_labelled_runs(stored):
    import json

    for path in stored.glob("sim/spec-none/*/run.json"):
        doc = json.loads(path.read_text())
        doc.pop("boot_run", None)
        doc["provenance"]["cold_expected"] = False
        path.write_text(json.dumps(doc))
    table, _ = _tables(stored, 'interval = "ci"')
    lanes = {lane.variant: lane for lane in table.lanes}
    assert lanes["spec-none"].unit == "runs"
    cell = table.frame.loc["decode c1", lanes["spec-none"].title]
    assert cell == "50.0 [45.0, 55.0] n=3 runs, boots unknown (20.0 cold)"
    note = table.notes[0]
    assert '"n=\u2026 runs, boots unknown": the stored runs do not say which boot they ran on' in note


def test_default_form_is_unchanged(stored):
    table, md = _tables(stored, "")
    lanes = {lane.variant: lane for lane in table.lanes}
    col = lanes["spec-none"].title
    assert table.frame.loc["decode c1", col] == f"50.0 (48.0{EN_DASH}52.0) (20.0 cold)"
    assert table.frame.loc["decode c1 ci", col] == "50.0 [45.0, 55.0] n=3 runs, 1 boot"  # opted in itself
    assert table.notes == [rp.tables.interval_note(table.lanes, {"ci"})]
    explicit, _ = _tables(stored, 'interval = "range"')
    assert explicit.frame.equals(table.frame)


def test_committed_tables_do_not_opt_in_and_render_as_before(lab_record):
    title, specs = rp.load_spec(lab_record / "tables.toml")
    assert all(
        s.interval == "range" and all(r.interval == "" for r in s.rows)
        for s in specs
        if not s.is_sweep and not s.axis  # the sweep and axis tables (content, turns, depths) opt in
    )
    rep = rp.generate(lab_record, write=False, plots=False)
    assert rep.markdown == (lab_record / "TABLES.md").read_text(encoding="utf-8")
    lane_tables = [
        t for t in rep.tables if not t.id.startswith("sweeps:") and t.id not in ("content", "turns")
    ]
    assert lane_tables and all(not any(n.startswith("Intervals:") for n in t.notes) for t in lane_tables)
    assert all(PLUS_MINUS not in str(v) for t in lane_tables for v in t.frame.to_numpy().ravel())


# --- tables.toml validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,match",
    [
        (
            '[[table]]\nid="a"\ncolumns="auto"\ninterval="sd"\nrows=[]',
            r"table\[0\]: table: interval 'sd' is not one of range, pm, ci",
        ),
        (
            '[[table]]\nid="a"\ncolumns="auto"\nrows=[{label="x", measure="m", interval="95"}]',
            r"table\[0\]: row 'x': interval '95' is not one of range, pm, ci",
        ),
        (
            '[[table]]\nid="a"\ncolumns="auto"\nrows=[{label="k", format="kv", interval="pm"}]',
            r"row 'k': interval is for number rows",
        ),
    ],
)
def test_bad_interval_names_file_and_key(tmp_path, text, match):
    f = tmp_path / "tables.toml"
    f.write_text(text)
    with pytest.raises(rp.specs.ReportError, match=match) as e:
        rp.load_spec(f)
    assert str(f) in str(e.value) and "interval" in str(e.value)


def test_interval_choices_load():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "tables.toml"
        f.write_text(
            '[[table]]\nid="a"\ncolumns="auto"\ninterval="ci"\n'
            'rows=[{label="x", measure="m"}, {label="y", measure="m", interval="pm"}, {label="r", format="runs"}]'
        )
        [spec] = rp.load_spec(f)[1]
    assert [spec.interval_of(r) for r in spec.rows] == ["ci", "pm", "range"]


def test_unit_tag_says_what_an_interval_is_over():
    tag = rp.intervals.unit_tag
    assert tag(3, "boots") == "n=3 boots" and tag(4, "runs on one boot") == "n=4 runs, 1 boot"
    assert tag(5, "runs on 2 boots") == "n=5 runs, 2 boots" and tag(3, "runs") == "n=3 runs, boots unknown"


def test_fmt_interval_and_few():
    assert rp.format.fmt_interval(1234.4, 1200.0, 1270.0, "pm", 0) == f"1,234 {PLUS_MINUS} 35"
    assert rp.format.fmt_interval(49.1, 47.9, 50.3, "ci") == "49.1 [47.9, 50.3]"
    assert rp.format.fmt_interval(750, 700, 800, "pm", 0, approx=True) == f"~750 {PLUS_MINUS} 50"
    assert rp.format.fmt_few(rp.format.Stat(49.1, 47.8, 50.7, n=2)) == f"49.1 (47.8{EN_DASH}50.7) n=2"
    assert rp.format.fmt_few(rp.format.Stat(29.7, 29.7, 29.7, n=1)) == "29.7 n=1"
    assert rp.format.fmt_few(None) == "\u2014"
