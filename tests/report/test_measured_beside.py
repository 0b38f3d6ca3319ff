"""Tomorrow's runs reach the note's tables: a note-style table (`measured = "beside"`) shows, beside a lane's
recorded figures, a column of the runs measured on that lane since, with TTFT and the boot time as rows; the
recorded figures and a real simulator run, in a temporary results folder."""

from __future__ import annotations

from labkit import lab, report
from labkit.errors import LabkitError
from labkit.store import import_figures
from tests.support.lanes import sim_recipe
from tests.support.workers import free_port

RECORDED = """
[defaults]
note = "recorded in the lane's NOTE.md"
date = 2026-10-23

[[run]]
key = "note-figures"
recipe = "notelane"
[run.measures]
decode_c1 = { min = 47.8, max = 50.7 }
ttft_c1 = 0.41
"""

TABLES = """
title = "t"

[[table]]
id = "note"
title = "The note's lane"
measured = "beside"
drop_empty_rows = true
columns = [{ title = "note lane", recipe = "notelane", variant = "default", source = "recorded" }]
rows = [
    { label = "decode c1 (t/s)", measure = "decode_c1", decimals = 1 },
    { label = "TTFT c1 (s)", measure = "ttft_c1", decimals = 3 },
    { label = "boot (s)", measure = "boot_s", decimals = 1 },
    { label = "staging (s)", measure = "staging_s", decimals = 0 },
]
"""


def test_a_measured_run_lands_beside_the_recorded_figures_with_ttft_and_boot(
    tmp_path, local_env, monkeypatch
):
    recipes, results = tmp_path / "recipes", tmp_path / "results"
    sim_recipe(recipes / "notelane", free_port(18340, 18349))
    monkeypatch.setenv("LABKIT_RECIPES", str(recipes))
    (tmp_path / "recorded.toml").write_text(RECORDED)
    (tmp_path / "tables.toml").write_text(TABLES)
    import_figures(tmp_path / "recorded.toml", results)
    before = report.generate(results, tmp_path / "tables.toml", write=False, plots=False).tables[0].frame
    # the test lane is a simulator's, so even its recorded column says so
    assert list(before.columns) == ["note lane (sim)"] and list(before.index) == [
        "decode c1 (t/s)",
        "TTFT c1 (s)",
    ]

    done = lab.measure(lab.plan("notelane"), results=results, progress=False)
    (run_id,) = done.run_ids
    table = report.generate(results, tmp_path / "tables.toml", write=False, plots=False).tables[0].frame
    assert list(table.columns) == ["note lane (sim)", "note lane, measured (sim)"]
    assert list(table.index) == ["decode c1 (t/s)", "TTFT c1 (s)", "boot (s)"]  # no lane staged: no row
    assert table.loc["decode c1 (t/s)", "note lane (sim)"] == "47.8–50.7"
    assert table.loc["TTFT c1 (s)", "note lane (sim)"] == "0.410"
    got = lab.wide(results).set_index("run")
    assert table.loc["TTFT c1 (s)", "note lane, measured (sim)"] == f"{got.loc[run_id, 'ttft_c1']:.3f}"
    boot = done.boot.boot_seconds
    assert boot is not None and table.loc["boot (s)", "note lane, measured (sim)"] == f"{boot:.1f}"


def test_a_bad_measured_option_names_the_file_and_table(tmp_path):
    import pytest

    for extra, columns, why in (
        ('measured = "below"', TABLES.split("columns = ")[1].split("\n")[0], "the one form is"),
        ('measured = "beside"', '"auto"', "goes with columns listed one by one"),
    ):
        spec = tmp_path / "tables.toml"
        body = TABLES.replace('measured = "beside"', extra)
        body = body.replace(TABLES.split("columns = ")[1].split("\n")[0], columns)
        spec.write_text(body)
        with pytest.raises(LabkitError, match=why) as e:
            report.load_spec(spec)
        assert str(spec) in str(e.value) and "table[0]" in str(e.value)
