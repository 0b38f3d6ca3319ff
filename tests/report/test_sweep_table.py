"""The sweep table and plot (docs/sweeps.md, "The sweep table and plot"): sweep records and run folders
written into a temp results folder, then the table's exact cells and notes, its Markdown and text, the
tables.toml keys that ask for it, the figure's data and the PNG `labkit report` writes."""

import math

import pytest

from labkit import report as rp
from labkit.report.format import EN_DASH
from labkit.report.tables import FLAG_MARK, interval_note
from labkit.store import ResultsStore, SweepAxisRecord, SweepPoint, SweepRecord, load_results, write_sweep

MNBT = "--max-num-batched-tokens"
LANE_TABLE = """
[[table]]
id = "m"
title = "Measured"
columns = "auto"
rows = [{ label = "decode c1 (t/s)", measure = "decode_c1" }, { label = "runs", format = "runs" }]
"""
SWEEP_TABLE = """
[[table]]
id = "sweeps"
title = "Sweep"
{key}
interval = "ci"
drop_empty_rows = true
rows = [
    {{ label = "decode c1 (t/s)", measure = "decode_c1", decimals = 1 }},
    {{ label = "decode c2 (aggregate t/s)", measure = "decode_c2_agg", decimals = 1 }},
    {{ label = "prefill ({{P}} prompt, t/s)", measure = "prefill_*", decimals = 0 }},
    {{ label = "acceptance", format = "acceptance" }},
    {{ label = "KV pool", format = "kv" }},
    {{ label = "runs", format = "runs" }},
]
"""
COLUMNS = ["decode c1 (t/s)", "decode c2 (aggregate t/s)", "prefill (4,096 prompt, t/s)", "runs"]


def _run(root, variant, measures, status="complete", flags=None, run_id=None):
    """One run folder of the sim recipe under `variant`, finished (or failed) through the store."""
    plan = {"recipe": "sim", "variant_id": variant, "variants": {"spec": "none"}, "label": "sim"}
    with ResultsStore(root).new_run(plan, run_id=run_id, simulated=True) as run:
        if status == "complete":
            summary = {"measures": dict(measures), **({"flags": flags} if flags else {})}
            run.finish(summary, provenance={"cold_expected": True})
        else:
            run.fail("boom")
    return run.run_id


def _mnbt_record(root, extra_runs=True):
    """Three points: 4096 with 3 runs, 8192 with 1 (plus an unlisted older run), 16384 failed."""
    a = [
        _run(root, "spec-none_mnbt-4096", {"decode_c1": d, "decode_c2_agg": c2, "prefill_4096": p})
        for d, c2, p in ((48.0, 90.0, 1000.0), (50.0, 100.0, 1100.0), (52.0, 110.0, 1200.0))
    ]
    if extra_runs:  # stored in the point's folder but not listed in the record: never shown
        _run(root, "spec-none_mnbt-8192", {"decode_c1": 999.0}, run_id="20200101T000000Z-000000")
    b = [
        _run(root, "spec-none_mnbt-8192", {"decode_c1": 60.0, "decode_c2_agg": 120.0, "prefill_4096": 1500.0})
    ]
    record = SweepRecord(
        name="mnbt",
        recipe="sim",
        base_variants={"spec": "none"},
        axes=[
            SweepAxisRecord(["engine", "args", MNBT], f'engine.args."{MNBT}"', "mnbt", [4096, 8192, 16384])
        ],
        points=[
            SweepPoint("spec-none_mnbt-4096", {"mnbt": 4096}, "measured", a),
            SweepPoint("spec-none_mnbt-8192", {"mnbt": 8192}, "resumed", b),
            SweepPoint(
                "spec-none_mnbt-16384", {"mnbt": 16384}, "failed", [], "OOM at boot: KV cache does not fit"
            ),
        ],
    )
    write_sweep(root, record)
    return record


def _spec(tmp_path, key='sweeps = "auto"', lane_table=True):
    f = tmp_path / "tables.toml"
    f.write_text('title = "T"\n' + (LANE_TABLE if lane_table else "") + SWEEP_TABLE.format(key=key))
    return f


@pytest.fixture()
def root(tmp_path):
    return tmp_path / "results"


def _lines(ax):
    """The labelled lines of a subplot (the error bars' caps are unlabelled lines too)."""
    return [line for line in ax.lines if not line.get_label().startswith("_")]


def _sweep_tables(root, spec):
    rep = rp.generate(root, spec, write=False, plots=False)
    return [t for t in rep.tables if t.id.startswith("sweeps:")], rep


def test_a_point_per_row_with_exact_cells_intervals_and_the_failure_note(root, tmp_path):
    _mnbt_record(root)
    [table], _ = _sweep_tables(root, _spec(tmp_path))
    assert table.id == "sweeps:sim/mnbt"
    assert table.title == f'Sweep: sim/mnbt [spec=none] over engine.args."{MNBT}" (sim)'
    frame = table.frame
    assert frame.index.name == MNBT and list(frame.index) == ["4096", "8192", "16384"]
    assert list(frame.columns) == COLUMNS  # acceptance and KV pool: no point has them, dropped
    # 3 runs: mean ± t(0.975, 2)·s/√3; 48/50/52 -> s = 2, half width 4.97
    # each interval says what its runs are: three runs, each after its own boot
    assert list(frame.loc["4096"]) == [
        "50.0 [45.0, 55.0] n=3 boots",
        "100.0 [75.2, 124.8] n=3 boots",
        "1,100 [852, 1,348] n=3 boots",
        "3",
    ]
    # 1 listed run (the unlisted run with 999 t/s in the same folder is left out): no interval, n=1
    assert list(frame.loc["8192"]) == ["60.0 n=1", "120.0 n=1", "1,500 n=1", "1"]
    assert list(frame.loc["16384"]) == ["failed"] * 4
    assert "point mnbt=16384 failed: OOM at boot: KV cache does not fit" in table.notes
    counted = [lane for lane in table.lanes if lane.runs]
    assert [lane.unit for lane in counted] == ["boots", "boots"]
    assert table.notes[0] == interval_note(counted, {"ci"})
    assert [lane.runs for lane in table.lanes] == [3, 1, 0]


def test_markdown_and_text_render_the_sweep_table(root, tmp_path):
    _mnbt_record(root)
    [table], rep = _sweep_tables(root, _spec(tmp_path))
    md = rep.markdown
    assert f'## Sweep: sim/mnbt [spec=none] over engine.args."{MNBT}" (sim)' in md
    header = next(line for line in md.splitlines() if line.startswith(f"| {MNBT}"))
    assert [c.strip() for c in header.strip("|").split("|")] == [MNBT, *COLUMNS]
    row = next(line for line in md.splitlines() if line.startswith("| 4096"))
    assert [c.strip() for c in row.strip("|").split("|")] == [
        "4096",
        "50.0 [45.0, 55.0] n=3 boots",
        "100.0 [75.2, 124.8] n=3 boots",
        "1,100 [852, 1,348] n=3 boots",
        "3",
    ]
    assert "Runs: 4 (measured)." in md and "point mnbt=16384 failed: OOM at boot" in md
    assert md.index("## Measured") < md.index("## Sweep:")  # spec order
    text = rp.to_text(table)
    assert text.splitlines()[0] == table.title and "failed" in text and "50.0 [45.0, 55.0]" in text
    assert "point mnbt=16384 failed" in repr(rp.TableView(table))


def test_a_pending_point_two_runs_and_a_categorical_axis(root, tmp_path):
    r1 = _run(root, "spec-none_kvd-auto", {"decode_c1": 48.0})
    r2 = _run(root, "spec-none_kvd-auto", {"decode_c1": 52.0})
    r3 = _run(root, "spec-none_kvd-fp8_e5m2", {"decode_c1": 55.0})
    lost = _run(root, "spec-none_kvd-fp8_e5m2", {}, status="failed")
    record = SweepRecord(
        "kvd",
        "sim",
        {"spec": "none"},
        [SweepAxisRecord(["engine", "args", "--kv-cache-dtype"], "x", "kvd", ["auto", "fp8", "fp8_e5m2"])],
        points=[
            SweepPoint("spec-none_kvd-auto", {"kvd": "auto"}, "measured", [r1, r2]),
            SweepPoint("spec-none_kvd-fp8", {"kvd": "fp8"}, "pending"),
            SweepPoint("spec-none_kvd-fp8_e5m2", {"kvd": "fp8_e5m2"}, "measured", [r3, lost]),
        ],
    )
    write_sweep(root, record)
    [table], _ = _sweep_tables(root, _spec(tmp_path, 'sweep = "sim/kvd"'))
    assert table.frame.index.name == "--kv-cache-dtype"
    assert list(table.frame.columns) == ["decode c1 (t/s)", "runs"]
    assert table.frame.loc["auto", "decode c1 (t/s)"] == f"50.0 (48.0{EN_DASH}52.0) n=2"
    assert list(table.frame.loc["fp8"]) == ["not measured", "not measured"]
    assert list(table.frame.loc["fp8_e5m2"]) == ["55.0 n=1", "1"]
    assert "point kvd=fp8 not measured: the sweep has not reached it." in table.notes
    assert any(n.startswith(f"point kvd=fp8_e5m2: run(s) {lost} ") for n in table.notes)

    fig = rp.sweep_figure(record, load_results(root))
    [ax] = fig.axes
    [line] = _lines(ax)
    assert list(line.get_xdata()) == [0.0, 2.0]  # categorical positions; the pending point has none
    assert list(line.get_ydata()) == [50.0, 55.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["auto", "fp8", "fp8_e5m2"]
    [bars] = ax.containers
    [segment] = bars.lines[2][0].get_segments()  # two runs: min–max, the single run has no bar
    assert segment.tolist() == [[0.0, 48.0], [0.0, 52.0]]


def test_a_two_axis_grid_has_a_column_per_axis_and_a_line_per_other_value(root, tmp_path):
    points = []
    for mnbt in (4096, 8192):
        for gmu in (0.8, 0.9):
            variant = f"spec-none_mnbt-{mnbt}_gmu-{gmu}"
            rid = _run(root, variant, {"decode_c1": mnbt / 100 + gmu})
            points.append(SweepPoint(variant, {"mnbt": mnbt, "gmu": gmu}, "measured", [rid]))
    axes = [
        SweepAxisRecord(["engine", "args", MNBT], "a", "mnbt", [4096, 8192]),
        SweepAxisRecord(["engine", "args", "--gpu-memory-utilization"], "b", "gmu", [0.8, 0.9]),
    ]
    record = SweepRecord("grid", "sim", {"spec": "none"}, axes, points=points)
    write_sweep(root, record)
    [table], rep = _sweep_tables(root, _spec(tmp_path))
    assert list(table.frame.index.names) == [MNBT, "--gpu-memory-utilization"]
    assert table.frame.loc[("8192", "0.9"), "decode c1 (t/s)"] == "82.8 n=1"
    assert f"| {MNBT} " in rep.markdown and "--gpu-memory-utilization" in rep.markdown
    fig = rp.sweep_figure(record, load_results(root))
    [ax] = fig.axes
    assert [line.get_label() for line in _lines(ax)] == ["gmu=0.8", "gmu=0.9"]
    assert [list(line.get_xdata()) for line in _lines(ax)] == [[4096.0, 8192.0]] * 2
    assert list(_lines(ax)[1].get_ydata()) == [pytest.approx(41.86), pytest.approx(82.82)]
    assert ax.containers == []  # single runs: just the points


def test_a_flagged_run_marks_its_points_cells(root, tmp_path):
    rid = _run(
        root,
        "spec-none_mnbt-4096",
        {"decode_c1": 50.0, "prefill_4096": 1000.0},
        flags=[{"code": "clock_drop", "window": "decode", "message": "SM clock fell"}],
    )
    axis = SweepAxisRecord(["engine", "args", MNBT], "a", "mnbt", [4096])
    write_sweep(
        root,
        SweepRecord(
            "f",
            "sim",
            {},
            [axis],
            points=[SweepPoint("spec-none_mnbt-4096", {"mnbt": 4096}, "measured", [rid])],
        ),
    )
    [table], _ = _sweep_tables(root, _spec(tmp_path))
    assert table.frame.loc["4096", "decode c1 (t/s)"] == f"50.0 n=1 {FLAG_MARK}"
    assert table.frame.loc["4096", "prefill (4,096 prompt, t/s)"] == "1,000 n=1"
    assert f"{FLAG_MARK} mnbt=4096, run {rid}, decode: clock_drop: SM clock fell" in table.notes
    assert "[default variants]" in table.title


def test_no_sweep_records_render_nothing_and_keep_the_document_byte_identical(root, tmp_path):
    _run(root, "spec-none", {"decode_c1": 50.0})
    with_sweeps = rp.generate(root, _spec(tmp_path), write=False, plots=False)
    plain = tmp_path / "plain.toml"
    plain.write_text('title = "T"\n' + LANE_TABLE)
    without = rp.generate(root, plain, write=False, plots=False)
    assert [t.id for t in with_sweeps.tables] == ["m"]
    assert with_sweeps.markdown == without.markdown and "Sweep" not in with_sweeps.markdown


def test_an_unknown_sweep_names_the_file_key_and_the_stored_sweeps(root, tmp_path):
    _mnbt_record(root, extra_runs=False)
    spec = _spec(tmp_path, 'sweep = "sim/nope"')
    with pytest.raises(rp.specs.ReportError) as e:
        rp.generate(root, spec, write=False, plots=False)
    msg = str(e.value)
    assert (
        str(spec) in msg and "table[1]" in msg and "sweep = 'sim/nope'" in msg and "stored: sim/mnbt" in msg
    )
    empty = tmp_path / "empty"
    with pytest.raises(rp.specs.ReportError, match=r"stored: none"):
        rp.generate(empty, spec, write=False, plots=False)


@pytest.mark.parametrize(
    "key,match",
    [
        ('sweeps = "all"', r"sweeps = 'all': only \"auto\""),
        ('sweep = "nope"', r"sweep = 'nope': expected \"<recipe>/<name>\""),
        ('sweeps = "auto"\nsweep = "sim/a"', r"not both"),
        ('sweeps = "auto"\ncolumns = "auto"', r"a sweep table takes no columns"),
        ('sweep = "sim/a"\nlanes = "rows"', r"a sweep table takes no lanes"),
    ],
)
def test_bad_sweep_keys_name_file_and_table(tmp_path, key, match):
    f = _spec(tmp_path, key, lane_table=False)
    with pytest.raises(rp.specs.ReportError, match=match) as e:
        rp.load_spec(f)
    assert str(f) in str(e.value) and "table[0]" in str(e.value)


def test_spec_keys_load():
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "tables.toml"
        f.write_text(SWEEP_TABLE.format(key='sweep = "sim/mnbt"'))
        [spec] = rp.load_spec(f)[1]
    assert spec.sweep == "sim/mnbt" and spec.is_sweep and spec.columns is None
    assert spec.where == f"{f}: table[0]"


def test_figure_has_a_subplot_per_headline_measure_with_interval_bars_and_failed_marks(root):
    record = _mnbt_record(root)
    fig = rp.sweep_figure(record, load_results(root))
    assert len(fig.axes) == 3
    assert [ax.get_title() for ax in fig.axes] == [
        "decode c1 (t/s)",
        "decode c2 aggregate (t/s)",
        "prefill 4,096-token prompt (t/s)",
    ]
    assert fig._suptitle.get_text() == f'sim/mnbt [spec=none] over engine.args."{MNBT}" (sim)'
    ax = fig.axes[0]
    assert ax.get_xlabel() == MNBT
    line, failed = _lines(ax)
    assert list(line.get_xdata()) == [4096.0, 8192.0] and list(line.get_ydata()) == [50.0, 60.0]
    [bars] = ax.containers  # only the 3-run point has a bar: the 95 % Student-t interval
    [[lo, hi]] = bars.lines[2][0].get_segments()
    half = rp.stats.t_ppf(0.975, 2) * 2 / math.sqrt(3)
    assert lo.tolist() == [4096.0, pytest.approx(50 - half)] and hi.tolist() == [
        4096.0,
        pytest.approx(50 + half),
    ]
    assert failed.get_label() == "failed" and list(failed.get_xdata()) == [16384.0]
    assert list(failed.get_ydata()) == [0.03] and failed.get_transform() == ax.get_xaxis_transform()
    assert "failed" in [t.get_text() for t in ax.get_legend().get_texts()]
    only = rp.sweep_figure(record, load_results(root), measures=["decode_c2_agg"])
    assert len(only.axes) == 1 and list(_lines(only.axes[0])[0].get_ydata()) == [100.0, 120.0]


def test_save_all_writes_a_png_per_sweep_record(root, tmp_path):
    _mnbt_record(root)
    made = rp.plots.save_all(load_results(root), tmp_path / "plots")
    png = tmp_path / "plots" / "sweep-sim-mnbt.png"
    assert png in made and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bare = tmp_path / "bare"
    _run(bare, "spec-none", {"decode_c1": 50.0})
    assert not [
        p for p in rp.plots.save_all(load_results(bare), tmp_path / "p2") if p.name.startswith("sweep-")
    ]


def test_an_auto_lane_table_may_leave_out_the_sweeps_points(root, tmp_path):
    _mnbt_record(root)
    _run(root, "spec-dspark", {"decode_c1": 70.0})  # an ordinary lane, in no sweep
    with_points = _spec(tmp_path)
    rep = rp.generate(root, with_points, write=False, plots=False)
    (lanes,) = [t for t in rep.tables if t.id == "m"]
    assert len(lanes.frame.columns) == 3  # spec-dspark and the two sweep points that have runs
    without = tmp_path / "without.toml"
    without.write_text(
        with_points.read_text().replace('columns = "auto"', 'columns = "auto"\nsweep_points = false')
    )
    rep = rp.generate(root, without, write=False, plots=False)
    (lanes,) = [t for t in rep.tables if t.id == "m"]
    assert [lane.variant for lane in lanes.lanes] == ["spec-dspark"]
    assert [t.id for t in rep.tables] == ["m", "sweeps:sim/mnbt"]  # the points are in their own table


def test_a_point_that_read_from_the_shared_nfs_is_marked_with_its_megabytes(root, tmp_path):
    """A NAS-read lane's prefill measures the NAS: the point whose run read from the shared NFS while measuring
    gets a ‡ on its swept value and a note with the bytes; a point reading nothing stays unmarked."""
    from labkit.report.sweep import NFS_MARK

    a = _run(root, "spec-none_mnbt-4096", {"decode_c1": 50.0, "nfs_read_bytes": 2.5e9})
    b = _run(root, "spec-none_mnbt-8192", {"decode_c1": 51.0, "nfs_read_bytes": 0.0})
    axis = SweepAxisRecord(["engine", "args", MNBT], f'engine.args."{MNBT}"', "mnbt", [4096, 8192])
    points = [
        SweepPoint("spec-none_mnbt-4096", {"mnbt": 4096}, "measured", [a]),
        SweepPoint("spec-none_mnbt-8192", {"mnbt": 8192}, "measured", [b]),
    ]
    write_sweep(root, SweepRecord("mnbt", "sim", {"spec": "none"}, [axis], points=points))
    [table], _ = _sweep_tables(root, _spec(tmp_path))
    assert list(table.frame.index) == [f"4096{NFS_MARK}", "8192"]
    assert any(
        "point mnbt=4096: a run read 2,500 MB from the shared NFS while measuring" in n for n in table.notes
    )
    assert not any("mnbt=8192: a run read" in n for n in table.notes)
