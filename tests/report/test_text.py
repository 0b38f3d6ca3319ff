"""Tables in the terminal (docs/measurement.md, "Tables in the terminal"): the text rendering of a table,
TableView's text and HTML, and evidence flags marked beside the figures they cover, from runs stored in a
temp results folder."""

import pandas as pd
import pytest

from labkit import report as rp
from labkit.report.tables import FLAG_MARK
from labkit.store import ResultsStore, RunFlag
from tests.support.results import requests_for, sim_plan, stored_run

TABLES = """
title = "T"

[[table]]
id = "m"
title = "Measured"
columns = "auto"
source = "measured"
rows = [
    { label = "decode c1 (t/s)", measure = "decode_c1", cold = "decode_c1_cold" },
    { label = "prefill ({P} prompt, t/s)", measure = "prefill_*", decimals = 0 },
    { label = "acceptance", format = "acceptance" },
    { label = "KV pool", format = "kv" },
    { label = "runs", format = "runs" },
]
notes = ["Median over runs."]
"""


def _frame(rows):
    cols = ["run", "recipe", "variant", "label", "measure", "value", "min", "max", "approx", "source"]
    df = pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])
    df["simulated"] = df["recipe"] == "sim"
    return df


def _two_lanes():
    spec = rp.specs.TableSpec(
        id="t",
        title="Two lanes",
        columns=None,
        rows=(
            rp.specs.RowSpec("decode c1 (t/s)", measure="decode_c1"),
            rp.specs.RowSpec("prefill (t/s)", measure="prefill_4096", decimals=0),
        ),
        notes=("A note long enough to be wrapped: " + "word " * 30,),
    )
    measures = _frame(
        [
            ("r1", "sim", "a", "sim lane", "decode_c1", 49.14, 49.14, 49.14, False, "measured"),
            ("r1", "sim", "a", "sim lane", "prefill_4096", 6012.0, 6012.0, 6012.0, False, "measured"),
            ("r2", "real", "b", "a real lane", "decode_c1", 7.0, 7.0, 7.0, False, "measured"),
        ]
    )
    return rp.tables.build_table(spec, measures)


def test_text_table_is_aligned_with_title_runs_line_and_wrapped_notes():
    text = rp.to_text(_two_lanes())
    lines = text.splitlines()
    assert lines[:3] == ["Two lanes", "=========", ""]
    header, rule, decode, prefill = lines[3:7]
    assert header.split() == ["measure", "a", "real", "lane", "sim", "lane", "(sim)"]
    assert decode.split() == ["decode", "c1", "(t/s)", "7.0", "49.1"]
    assert prefill.split() == ["prefill", "(t/s)", "\u2014", "6,012"]
    # one width for every line of the grid, figures right-aligned under their header
    assert len({len(line) for line in (header, rule, decode, prefill)}) == 1
    assert header.endswith("sim lane (sim)") and decode.endswith("49.1") and prefill.endswith("6,012")
    assert set(rule) == {"-", " "}
    assert lines[7:9] == ["", "Runs: 2 (any)."]
    note = lines[10:]
    assert " ".join(note) == ("A note long enough to be wrapped: " + "word " * 30).strip()
    assert all(len(line) <= 100 for line in note) and len(note) == 2


def test_text_of_an_empty_table_says_so():
    spec = rp.specs.TableSpec(
        id="e", title="Nothing", columns=None, rows=(rp.specs.RowSpec("x", measure="x"),), empty="None."
    )
    table = rp.tables.build_table(
        spec, _frame([("r1", "sim", "a", "s", "y", 1.0, 1.0, 1.0, False, "measured")]).iloc[:0]
    )
    assert rp.to_text(table) == "Nothing\n=======\n\nNone."


def test_table_view_is_text_in_a_terminal_and_styled_html_in_jupyter():
    from IPython.core.formatters import DisplayFormatter

    table = _two_lanes()
    view = rp.TableView(table)
    assert repr(view) == rp.to_text(table) == str(view)
    data, _ = DisplayFormatter().format(view)
    assert data["text/plain"] == rp.to_text(table)  # what papermill's log prints
    assert "<pandas" not in data["text/plain"] and "object at 0x" not in data["text/plain"]
    html = data["text/html"]
    assert "<table" in html and "Two lanes" in html and "49.1" in html
    assert "background-color: #fff3cd" in html  # the simulated lane stays shaded
    assert html.endswith("<p>" + table.notes[0] + "</p>")
    assert data[rp.TABLE_MIME] == {"id": "t", "title": "Two lanes"}


# --- evidence flags ---------------------------------------------------------------------------------------


def _store(root, run_id, measures, spec="none", flags=None):
    summary = {"measures": dict(measures), "n_ok": 4}
    if flags is not None:
        summary["flags"] = flags
    with ResultsStore(root).new_run(sim_plan(spec), run_id=run_id) as run:
        run.write_requests(requests_for(run.run_id, tps=measures["decode_c1"]))
        run.finish(summary, boot={"kv_pool_tokens": 1000}, provenance={"harness": "test"})
    return run.path


MEASURES = {"decode_c1": 30.0, "decode_c1_cold": 20.0, "prefill_4096": 700.0, "prefill_12600": 650.0}
SPEC_MEASURES = {**MEASURES, "decode_c1": 50.0, "accept_per_draft": 4.5, "accept_k": 5}


def _rows(markdown: str) -> dict[str, list[str]]:
    out = {}
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("| measure"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[cells[0]] = cells[1:]
    return out


@pytest.fixture()
def root(tmp_path):
    root = tmp_path / "results"
    root.mkdir()
    (root / "tables.toml").write_text(TABLES)
    return root


def test_runs_without_flags_render_as_before(root):
    _store(root, "20261201T000001Z-aaaaa1", MEASURES)
    _store(root, "20261201T000002Z-aaaaa2", SPEC_MEASURES, spec="dspark", flags=[])
    rep = rp.generate(root, write=False, plots=False)
    assert FLAG_MARK not in rep.markdown
    assert rep.tables[0].notes == ["Median over runs."]


def test_a_decode_flag_marks_the_decode_figures_of_its_lane_and_names_run_and_message(root):
    _store(root, "20261201T000001Z-aaaaa1", MEASURES)
    flag = {"code": "foreign-traffic", "window": "decode", "message": "decode: 3 requests finished, 2 sent"}
    _store(root, "20261201T000002Z-aaaaa2", SPEC_MEASURES, spec="dspark", flags=[flag])
    rep = rp.generate(root, write=False, plots=False)
    rows = _rows(rep.markdown)
    [table] = rep.tables
    spec_col = [lane.title for lane in table.lanes].index("simulated stock vLLM + DSpark k5 (sim)")
    none_col = 1 - spec_col
    assert rows["decode c1 (t/s)"][spec_col] == f"50.0 (20.0 cold) {FLAG_MARK}"
    assert rows["acceptance"][spec_col] == f"4.50 of 5 {FLAG_MARK}"  # the decode window's counters
    for label in ("prefill (4,096 prompt, t/s)", "prefill (12,600 prompt, t/s)", "KV pool", "runs"):
        assert FLAG_MARK not in rows[label][spec_col], label
    assert all(FLAG_MARK not in cells[none_col] for cells in rows.values())  # the unflagged lane
    assert table.notes[-1] == (
        f"{FLAG_MARK} simulated stock vLLM + DSpark k5 (sim), run 20261201T000002Z-aaaaa2, decode: "
        "foreign-traffic: decode: 3 requests finished, 2 sent"
    )
    assert table.notes[-1] in rep.markdown and table.notes[-1] in rp.to_text(table).replace("\n", " ")


def test_a_prefill_flag_marks_only_its_prompt_length(root):
    flags = [{"code": "prefix-cache-hit", "window": "prefill_4096", "message": "cache hits"}]
    _store(root, "20261201T000001Z-aaaaa1", {**MEASURES, "prefill_40960": 500.0}, flags=flags)
    rows = _rows(rp.generate(root, write=False, plots=False).markdown)
    assert rows["prefill (4,096 prompt, t/s)"] == [f"700 {FLAG_MARK}"]
    assert FLAG_MARK not in rows["prefill (40,960 prompt, t/s)"][0]  # not a prefix match on the number
    assert FLAG_MARK not in rows["prefill (12,600 prompt, t/s)"][0]
    assert FLAG_MARK not in rows["decode c1 (t/s)"][0]


def test_a_flag_without_a_known_window_marks_the_whole_lane_and_one_no_row_shows_adds_no_note(root):
    flags = [
        {"code": "busy-at-start", "window": None, "message": "2 requests running"},
        {"code": "counter-reset", "window": "prefill_99999", "message": "not in this table"},
    ]
    _store(root, "20261201T000001Z-aaaaa1", MEASURES, flags=flags)
    [table] = rp.generate(root, write=False, plots=False).tables
    figures = [v for v in table.frame.iloc[:, 0] if v != rp.format.MISSING]
    assert figures and all(v.endswith(f" {FLAG_MARK}") for v in figures)
    assert [n for n in table.notes if n.startswith(FLAG_MARK)] == [
        f"{FLAG_MARK} simulated stock vLLM (sim), run 20261201T000001Z-aaaaa1, whole run: busy-at-start: "
        "2 requests running"
    ]
    assert rp.format.MISSING in list(table.frame.iloc[:, 0])  # "not measured" is never marked


def test_build_tables_takes_flags_like_boots():
    measures = _frame([("r1", "sim", "a", "sim lane", "decode_c1", 49.0, 49.0, 49.0, False, "measured")])
    spec = rp.specs.TableSpec(
        id="t", title="T", columns=None, rows=(rp.specs.RowSpec("d", measure="decode_c1"),)
    )
    [plain] = rp.tables.build_tables(measures, [spec])
    [marked] = rp.tables.build_tables(measures, [spec], flags={"r1": [RunFlag("x", "decode")]})
    assert plain.frame.iloc[0, 0] == "49.0" and marked.frame.iloc[0, 0] == f"49.0 {FLAG_MARK}"
    assert marked.notes == [f"{FLAG_MARK} sim lane (sim), run r1, decode: x."]
    assert rp.tables.flags_of(stored_run({"run_id": "r0", "summary": {"measures": {}}})) == []
    flagged = stored_run({"run_id": "r1", "summary": {"flags": [{"code": "x", "window": "decode"}]}})
    assert rp.tables.flags_of(flagged) == [RunFlag("x", "decode", "")]
