"""The wide frame (Results.wide, lab.wide): one row per stored run, its measures as columns, its variant axes
and swept keys beside what it was; read from a copy of the committed lab record."""

from __future__ import annotations

import math

from labkit import lab
from labkit.store import load_results


def test_one_row_per_run_with_its_measures_axes_and_provenance(lab_record):
    data = load_results(lab_record)
    frame = data.wide()
    assert list(frame["run"]) == list(data.docs)  # every loaded run once, in the store's order
    assert list(frame.columns[:10]) == [
        "run", "recipe", "variant", "label", "source", "simulated", "date", "image", "engine_version",
        "labkit_version",
    ]  # fmt: skip
    # each measure is a column holding the run's own value
    for run_id, doc in list(data.docs.items())[:8]:
        row = frame[frame["run"] == run_id].iloc[0]
        for key, value in doc.summary.measures.items():
            if value is not None:
                assert row[key] == value, (run_id, key)
    # the variant axes are columns; a run of a recipe without that axis has none
    nospec = frame[frame["run"] == "20261023-recorded-baseline-vllm-nospec"].iloc[0]
    assert (nospec["spec"], nospec["staging"]) == ("none", "nas")
    assert nospec["decode_c1"] == 29.7 and nospec["date"] == "2026-10-23"  # the note's date, not the import's
    prod = frame[frame["recipe"] == "dsv41-flash-1017-4x-sglang-ep2"].iloc[0]
    assert isinstance(prod["staging"], float) and math.isnan(prod["staging"])
    assert math.isnan(prod["decode_c1"])  # a recorded range has no value; the long frame has its min and max


def test_a_sweeps_swept_key_is_a_numeric_column(lab_record):
    frame = load_results(lab_record).wide(["decode_c1"])
    swept = frame[frame["dt"].notna()]
    assert len(swept) and swept["dt"].dtype.kind in "if"
    assert list(frame.columns[-1:]) == ["decode_c1"] and "decode_c2_agg" not in frame.columns


def test_lab_wide_filters_by_recipe_name_or_alias(lab_record):
    by_alias = lab.wide(lab_record, recipes="prod", measures=["decode_c1"])
    assert set(by_alias["recipe"]) == {"dsv41-flash-1017-4x-sglang-ep2"} and len(by_alias) == 1
    both = lab.wide(lab_record, recipes="dsv41,sim")
    assert set(both["recipe"]) == {"dsv41-flash-1017-4x-vllm032", "sim"}


def test_boot_and_staging_times_are_rows_of_the_run_that_booted(tmp_path):
    """boot_s from the boot facts and staging_s from staging.json, on the run that booted the lane only: a later
    run on the same boot repeats the boot facts, not the boot."""
    from labkit.measure import RunSummary
    from labkit.store import ResultsStore
    from tests.support.results import sim_plan

    store = ResultsStore(tmp_path)
    boot = {"boot_seconds": 612.5}
    with store.new_run(sim_plan()) as first:
        first.write_text("staging.json", '{"seconds": 481.0, "views": []}')
        first.finish(RunSummary(measures={"decode_c1": 30.0}, n_ok=4), boot=boot)
    with store.new_run(sim_plan(), boot=boot, boot_run=first.run_id) as later:
        later.finish(RunSummary(measures={"decode_c1": 31.0}, n_ok=4), boot=boot)
    frame = load_results(tmp_path).wide(["decode_c1", "boot_s", "staging_s"]).set_index("run")
    assert (frame.loc[first.run_id, "boot_s"], frame.loc[first.run_id, "staging_s"]) == (612.5, 481.0)
    assert math.isnan(frame.loc[later.run_id, "boot_s"]) and math.isnan(frame.loc[later.run_id, "staging_s"])
