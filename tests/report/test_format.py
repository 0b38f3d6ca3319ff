import pandas as pd
import pytest

from labkit import report as rp
from labkit.report.format import EN_DASH, Stat
from labkit.store.load import MEASURE_COLUMNS


def test_range_uses_en_dash_and_equal_decimals():
    assert rp.format.fmt_range(47.8, 50.7) == f"47.8{EN_DASH}50.7"
    assert (
        rp.format.fmt_range(47.0, 50.25, 1) == f"47.0{EN_DASH}50.2"
    )  # both ends one decimal ("47.0", not "47")
    assert rp.format.fmt_range(2800, 3127, 0) == f"2,800{EN_DASH}3,127"
    assert "-" not in rp.format.fmt_range(1.0, 2.0) and "\u2014" not in rp.format.fmt_range(1.0, 2.0)


def test_range_collapses_when_ends_format_equal():
    assert rp.format.fmt_range(29.7, 29.7) == "29.7"
    assert rp.format.fmt_range(29.71, 29.74) == "29.7"


@pytest.mark.parametrize(
    "stat,decimals,expected",
    [
        (Stat(49.1, 47.8, 50.7, n=3), 1, f"49.1 (47.8{EN_DASH}50.7)"),
        (Stat(29.7, 29.7, 29.7, n=1), 1, "29.7"),
        (Stat(29.7, 29.7, 29.7, n=3), 1, "29.7"),
        (Stat(None, 47.8, 50.7, n=1), 1, f"47.8{EN_DASH}50.7"),  # a recorded range: no median invented
        (Stat(750, 750, 750, approx=True, n=1), 0, "~750"),
        (Stat(3957, 3957, 3957, n=1), 0, "3,957"),
        (None, 1, "\u2014"),
        (Stat(None, None, None), 1, "\u2014"),
    ],
)
def test_fmt_stat(stat, decimals, expected):
    assert rp.format.fmt_stat(stat, decimals) == expected


def test_cold_in_brackets():
    assert rp.format.fmt_with_cold(Stat(52.9, 52.9, 52.9), Stat(25.5, 25.5, 25.5)) == "52.9 (25.5 cold)"
    assert (
        rp.format.fmt_with_cold(Stat(30.0, 29.0, 31.0), Stat(20.0, 19.0, 21.0))
        == f"30.0 (29.0{EN_DASH}31.0) (19.0{EN_DASH}21.0 cold)"
    )
    assert rp.format.fmt_with_cold(Stat(52.9, 52.9, 52.9), None) == "52.9"
    assert rp.format.fmt_with_cold(None, Stat(25.5, 25.5, 25.5)) == "\u2014 (25.5 cold)"


def test_acceptance_kv_nfs():
    one = lambda v: Stat(v, v, v, n=1)  # noqa: E731
    assert rp.format.fmt_acceptance(one(4.79), one(5)) == "4.79 of 5"
    assert rp.format.fmt_acceptance(one(4.79), None) == "4.79"
    assert rp.format.fmt_acceptance(None, one(5)) == "\u2014"
    # K is the configured integer: a stored K inferred as proposed per draft (3.61614) is not rendered as K
    assert rp.format.fmt_acceptance(one(2.71), one(3.61614)) == "2.71"
    assert rp.format.fmt_kv(one(8_726_823), one(131072)) == "8.73M tokens @131072"
    assert rp.format.fmt_kv(one(7_070_000), None) == "7.07M tokens"
    assert rp.format.fmt_kv(Stat(8.0e6, 7.9e6, 8.1e6, n=3), None) == f"8.00M tokens (7.90{EN_DASH}8.10M)"
    assert rp.format.fmt_nfs(one(258e6), "short completion") == "+258 MB per short completion"
    assert rp.format.fmt_nfs(one(0), "short completion") == "0 MB"
    assert rp.format.fmt_nfs(Stat(258e6, 258e6, 258e6, approx=True), "") == "~+258 MB"


def _measures(rows):
    cols = MEASURE_COLUMNS
    full = []
    for r in rows:
        d = dict(zip(["run", "recipe", "variant", "measure", "value"], r[:5], strict=True))
        d.setdefault("label", "lane " + d["variant"])
        d["min"] = r[5] if len(r) > 5 else d["value"]
        d["max"] = r[6] if len(r) > 6 else d["value"]
        d.update(approx=False, simulated=d["recipe"] == "sim", source="measured")
        full.append(d)
    return pd.DataFrame(full, columns=cols).astype({"value": float, "min": float, "max": float})


def test_build_table_median_range_missing_and_sim_marking():
    m = _measures(
        [
            ("r1", "sim", "spec-none", "decode_c1", 47.8),
            ("r2", "sim", "spec-none", "decode_c1", 49.1),
            ("r3", "sim", "spec-none", "decode_c1", 50.7),
            ("r1", "sim", "spec-none", "decode_c1_cold", 20.0),
            ("r4", "real", "spec-x", "decode_c2_agg", 66.4),
        ]
    )
    spec = rp.specs.TableSpec(
        id="t",
        title="T",
        columns=None,
        rows=(
            rp.specs.RowSpec("decode c1", measure="decode_c1", cold="decode_c1_cold"),
            rp.specs.RowSpec("decode c2", measure="decode_c2_agg"),
            rp.specs.RowSpec("acceptance", format="acceptance", decimals=2),
            rp.specs.RowSpec("runs", format="runs"),
        ),
        drop_empty_rows=True,
    )
    t = rp.tables.build_table(spec, m)
    assert list(t.frame.columns) == ["lane spec-x", "lane spec-none (sim)"]  # sorted by recipe: real < sim
    assert t.frame.loc["decode c1", "lane spec-none (sim)"] == f"49.1 (47.8{EN_DASH}50.7) (20.0 cold)"
    assert t.frame.loc["decode c1", "lane spec-x"] == "\u2014"
    assert t.frame.loc["decode c2", "lane spec-x"] == "66.4"
    assert "acceptance" not in t.frame.index  # dropped: nobody has it
    assert t.frame.loc["runs"].tolist() == ["1", "3"]
    assert t.sim_titles == ["lane spec-none (sim)"]
    md = rp.tables.to_markdown(t)
    assert "lane spec-none (sim)" in md.splitlines()[2]  # the header row
    assert f"49.1 (47.8{EN_DASH}50.7) (20.0 cold)" in md


def test_markdown_never_reparses_cells():
    from labkit import report as r

    frame = pd.DataFrame(
        [["007", "1e3", "2,800"]],
        index=pd.Index(["row"], name="measure"),
        columns=["a", "b", "c"],
        dtype=object,
    )
    md = r.tables.to_markdown(r.tables.Table(id="x", title="X", frame=frame))
    assert "007" in md and "1e3" in md and "2,800" in md and "1000" not in md
    assert "|:-" in md and "-:|" in md  # first column left-aligned, numbers right-aligned


def test_rows_as_lanes_and_pattern_rows():
    m = _measures(
        [
            ("r1", "sim", "a", "prefill_12600", 3957),
            ("r1", "sim", "a", "prefill_4096", 605),
            ("r2", "sim", "b", "prefill_4096", 750),
            ("r2", "sim", "b", "prefill_4096_raw", 749),
            ("r2", "sim", "b", "prefill_4096_ttft", 5.5),
        ]
    )
    spec = rp.specs.TableSpec(
        id="t",
        title="T",
        columns=(rp.specs.ColumnSpec("A", "sim", "a"), rp.specs.ColumnSpec("B", "sim", "b")),
        rows=(rp.specs.RowSpec("prefill {P}", measure="prefill_*", decimals=0),),
        corner="setup",
        lanes="rows",
    )
    t = rp.tables.build_table(spec, m)
    # numeric order, not string order; side measures (_raw, _ttft) are not prompt lengths
    assert list(t.frame.columns) == ["prefill 4,096", "prefill 12,600"]
    assert t.frame.index.tolist() == ["A (sim)", "B (sim)"] and t.frame.index.name == "setup"
    assert t.frame.loc["B (sim)", "prefill 12,600"] == "\u2014"
    assert t.frame.loc["A (sim)", "prefill 12,600"] == "3,957"


def test_styler_marks_sim_columns():
    m = _measures([("r1", "sim", "a", "decode_c1", 30.0), ("r2", "real", "b", "decode_c1", 40.0)])
    spec = rp.specs.TableSpec(
        id="t", title="Cap", columns=None, rows=(rp.specs.RowSpec("d", measure="decode_c1"),)
    )
    html = rp.tables.to_styler(rp.tables.build_table(spec, m)).to_html()
    assert "Cap" in html and "#fff3cd" in html


@pytest.mark.parametrize(
    "text,match",
    [
        ('[[table]]\nid="a"\ncolumns="auto"\nrows=[{label="x", format="bogus"}]', "format 'bogus'"),
        ('[[table]]\nid="a"\ncolumns="auto"\nrows=[{label="x"}]', "needs a measure"),
        ('[[table]]\nid="a"\ncolumns="auto"\nrows=[]\nbogus=1', "unknown key"),
        (
            '[[table]]\nid="a"\ncolumns="auto"\nrows=[]\n[[table]]\nid="a"\ncolumns="auto"\nrows=[]',
            "duplicate id",
        ),
        ("title = [", "TOML syntax"),
        ('[[table]]\nid="a"\ncolumns="auto"\nrows=[{measure="echo_ms"}]', "table\\[0\\]: 'label'"),
    ],
)
def test_bad_table_spec_names_file_and_table(tmp_path, text, match):
    f = tmp_path / "tables.toml"
    f.write_text(text)
    with pytest.raises(rp.specs.ReportError, match=match) as e:
        rp.load_spec(f)
    assert str(f) in str(e.value)


def test_prefill_points_keep_recorded_and_measured_figures_of_a_lane_apart():
    import pandas as pd

    from labkit.report.stats import prefill_points
    from labkit.store.load import MEASURE_COLUMNS

    def row(run, value, source):
        return [
            run,
            "dsv41",
            "spec-dspark",
            "DSV4.1",
            "prefill_12600",
            value,
            value,
            value,
            False,
            False,
            source,
        ]

    measures = pd.DataFrame(
        [row("r1", 750.0, "recorded"), row("r2", 3900.0, "measured")], columns=MEASURE_COLUMNS
    )
    points = {name: stat.median for name, _, stat in prefill_points(measures)}
    assert points == {"DSV4.1 [spec-dspark] (recorded)": 750.0, "DSV4.1 [spec-dspark]": 3900.0}


def test_a_row_without_a_label_is_named_by_the_catalogue(tmp_path):
    f = tmp_path / "tables.toml"
    f.write_text(
        '[[table]]\nid="a"\ncolumns="auto"\nrows=[{measure="decode_c2_agg"}, {label="x", measure="ttft_c1"}]'
    )
    (spec,) = rp.load_spec(f)[1]
    assert [r.label for r in spec.rows] == ["decode c2 aggregate (t/s)", "x"]
