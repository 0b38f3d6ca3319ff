"""Plots a person can read: every plot `labkit report` draws, rendered from a copy of the committed runs (and a
simulator lane measured under load and at depths beside them) into a temporary folder, has no two text boxes
overlapping after layout; lanes far apart in scale get a log axis; a recorded range is drawn as a range, not as a
median; TTFT by prompt length and by depth, and per-request CDFs, are drawn."""

from __future__ import annotations

from labkit import lab
from labkit.report.plots import measure_bars, report_figures, save_png, table_figures
from labkit.store import load_results
from tests.support.lanes import sim_recipe
from tests.support.plots import text_overlaps
from tests.support.workers import free_port


def test_every_report_plot_of_the_lab_record_reads_without_overlapping_text(lab_record, tmp_path):
    data = load_results(lab_record)
    figs = report_figures(data)
    assert {"measures.png", "prefill.png", "ttft.png", "distributions.png"} <= set(figs)
    assert any(n.startswith("sweep-") for n in figs)
    for name, fig in figs.items():
        assert text_overlaps(fig) == [], name
        assert save_png(fig, tmp_path / name).stat().st_size > 0
    bars = figs["measures.png"]
    # the tiny CPU lane decodes at ~500 t/s beside lanes at 30-60 t/s: a log axis, said in the panel's title
    assert bars.axes[0].get_xscale() == "log" and bars.axes[0].get_title(loc="left").endswith("log scale")
    # sweep points are drawn in the sweep's own plot, not as lanes beside the others
    labels = [t.get_text() for t in bars.axes[0].get_yticklabels()]
    assert labels and not any("_dt-" in label for label in labels)


def test_each_lane_table_has_its_figure_and_it_reads(lab_record, tmp_path):
    from labkit import report

    data = load_results(lab_record)
    _, specs = report.load_spec(report.spec_path(data.root))
    figs = table_figures(data, specs)
    assert set(figs) == {"table-baseline.png", "table-dspark.png", "table-staging.png", "table-measured.png"}
    for name, fig in figs.items():
        assert text_overlaps(fig) == [], name
    dspark = figs["table-dspark.png"]
    assert dspark.texts[0].get_text().startswith("With DSpark K5")  # the table's title
    assert [ax.get_title(loc="left") for ax in dspark.axes[:2]] == [
        "decode c1 (t/s)",
        "decode c2 (aggregate t/s)",
    ]
    measured = [t.get_text() for t in figs["table-measured.png"].axes[0].get_yticklabels()]
    assert measured and not any("_dt-" in label for label in measured)  # sweep_points = false, as the table
    written = report.generate(lab_record, write=True, plots=True).plots
    assert {p.name for p in written} >= set(figs)


def test_a_recorded_range_is_a_segment_and_close_lanes_keep_a_linear_axis(lab_record):
    m = load_results(lab_record).measures
    note = m[m["recipe"].str.startswith("dsv41") & (m["measure"] == "decode_c1")]
    fig = measure_bars(note)
    ax = fig.axes[0]
    assert ax.get_xscale() == "linear"  # 29.7 to 59.7: within 10x
    labels = [t.get_text() for t in ax.get_yticklabels()]
    row = labels.index("production SGLang EP2 4x \u00b7 spec-dspark (recorded)")
    segments = [ln for ln in ax.get_lines() if list(ln.get_ydata()) == [row, row]]
    assert [list(ln.get_xdata()) for ln in segments] == [[47.8, 50.7]]  # the range itself, no median dot
    assert text_overlaps(fig) == []


def test_the_load_plots_of_a_measured_load_run_read_without_overlapping_text(
    lab_record, tmp_path, local_env, monkeypatch
):
    sim_recipe(
        tmp_path / "recipes" / "loadlane",
        free_port(18350, 18359),
        extra=(
            "[measure.load]\nconcurrency = [1, 2, 4]\nrequests = 8\noutput_tokens = 16\n"
            "[measure.depth]\ntokens = [0, 1024]\nprompt_tokens = 32\noutput_tokens = 16\n"
        ),
    )
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    lab.measure(lab.plan("loadlane"), results=lab_record, progress=False)
    figs = report_figures(load_results(lab_record))
    assert "load.png" in figs and "ttft-loadlane-default.png" in figs
    # TTFT by prompt length and by depth, the depth's uncached and cached as two series
    by_depth = figs["ttft.png"].axes[1]
    assert by_depth.get_title(loc="left").startswith("TTFT by context depth")
    assert {t.get_text() for t in by_depth.get_legend().get_texts()} == {
        "sim test lane (sim) \u00b7 default (uncached)",
        "sim test lane (sim) \u00b7 default (cached)",
    }
    for name, fig in figs.items():
        assert text_overlaps(fig) == [], name
