"""labkit.lab.sweep_run on the simulator, whose settings are engine flags, so each point has a known truth: one
lane stored per point, request-side points on one boot, resume by provenance, a failed point recorded while
the rest run, and bad keys or flags refused before anything boots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from labkit import lab
from labkit.cli.app import main
from labkit.errors import LabkitError, RecipeError
from labkit.store import load_results, read_sweep
from tests.support.lanes import NO_TELEMETRY, sim_recipe

PORT = 18800
DT = 'engine.args."--decode-tps"'
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.fixture
def recipes(tmp_path, monkeypatch):
    root = tmp_path / "recipes"
    sim_recipe(root / "fastsim", port=PORT, measure=NO_TELEMETRY)  # a sweep's points are what is tested
    monkeypatch.setenv("LABKIT_RECIPES", str(root))
    return root


def _run_dirs(results: Path) -> list[Path]:
    return sorted(p.parent for p in results.glob("*/*/*/run.json"))


def _decode_c1(results: Path) -> dict[str, float]:
    m = load_results(results).measures
    rows = m[m["measure"] == "decode_c1"]
    return dict(zip(rows["variant"], rows["value"], strict=True))


@pytest.mark.alone  # the swept decode rates within 3 % (tests/support/workers.py)
def test_three_points_store_three_lanes_at_their_true_speeds(recipes, tmp_path):
    results = tmp_path / "results"
    sw = lab.sweep("fastsim", f"{DT}=40,80,160", results=results, progress=False)
    ids = [p.variant_id for p in sw.record.points]
    assert ids == ["dt-40", "dt-80", "dt-160"]
    assert [p.status for p in sw.record.points] == ["measured"] * 3
    decode = _decode_c1(results)
    for vid, truth in zip(ids, (40, 80, 160), strict=True):
        assert decode[vid] == pytest.approx(truth, rel=0.03)  # the sim's decode rate is the swept flag
    runs = [json.loads((d / "run.json").read_text()) for d in _run_dirs(results)]
    assert len(runs) == 3 and all("boot_run" not in r for r in runs)  # three boots, each its own run folder
    assert {r["plan"]["resolved"]["engine"]["args"]["--decode-tps"] for r in runs} == {40, 80, 160}
    stored = read_sweep(sw.path)
    assert stored.points == sw.record.points and stored.axes[0].dotted == DT
    (table,) = lab.sweep_tables(sw)
    assert table.frame.index.name == "--decode-tps" and list(table.frame.index) == ["40", "80", "160"]
    c1 = float(table.frame.iloc[2, 0].split(" ")[0])  # "158.6 n=1 (...)": the 160 t/s point's stored run
    assert c1 == pytest.approx(decode["dt-160"], abs=0.05)
    assert lab.save_sweep_figure(sw).is_file()
    # points compare like lanes, and the gate expects the swept key to differ (it is not in the recipe file)
    c = lab.compare("fastsim/dt-40", "fastsim/dt-160", results=results)
    items = {i.fact: i for i in c.gate.items}
    assert "recipe content" not in items and "engine.args.--decode-tps" in items["varied axes"].note
    assert runs[0]["provenance"]["sweep"] == {
        "name": "fastsim/default_over_dt",
        "axes": {"dt": ["engine", "args", "--decode-tps"]},
    }


def test_request_side_points_share_one_boot(recipes, tmp_path):
    results = tmp_path / "results"
    sw = lab.sweep("fastsim", "measure.decode.output_tokens=8,24", results=results, progress=False)
    first, second = (sw.lanes[p.variant_id] for p in sw.record.points)
    a = json.loads((first.run_dirs[0] / "run.json").read_text())
    b = json.loads((second.run_dirs[0] / "run.json").read_text())
    assert b["boot_run"] == a["run_id"]  # measured on the boot of the first point's run
    assert (first.run_dirs[0] / "boot.json").is_file() and not (second.run_dirs[0] / "boot.json").exists()
    assert b["plan"]["resolved"]["measure"]["decode"]["output_tokens"] == 24
    assert a["summary"]["measures"]["decode_c1_cold"] > 0  # only the boot's first run meets a cold engine
    assert b["summary"]["measures"].get("decode_c1_cold") is None
    assert b["provenance"]["cold_expected"] is False and a["provenance"]["cold_expected"] is True


def test_a_rerun_skips_points_with_identical_provenance(recipes, tmp_path):
    results = tmp_path / "results"
    lab.sweep("fastsim", f"{DT}=40,80", results=results, progress=False)
    before = _run_dirs(results)
    sw = lab.sweep("fastsim", f"{DT}=40,80,160", results=results, progress=False)
    assert [p.status for p in sw.record.points] == ["resumed", "resumed", "measured"]
    after = _run_dirs(results)
    assert len(after) == len(before) + 1 and set(before) < set(after)
    assert set(sw.lanes) == {"dt-160"}
    # more runs asked for than a point has: that point is measured again, with the new count; the points
    # this --over leaves out stay in the record
    sw = lab.sweep("fastsim", f"{DT}=40", runs=2, results=results, progress=False)
    assert [(p.variant_id, p.status) for p in sw.record.points] == [
        ("dt-40", "measured"),
        ("dt-80", "resumed"),
        ("dt-160", "measured"),
    ]
    assert len(sw.record.points[0].runs) == 2 and read_sweep(sw.path).points == sw.record.points


def test_a_changed_recipe_refuses_to_resume_until_fresh(recipes, tmp_path):
    results = tmp_path / "results"
    lab.sweep("fastsim", f"{DT}=40,80", results=results, progress=False)
    before = _run_dirs(results)
    file = recipes / "fastsim" / "recipe.toml"
    file.write_text(file.read_text().replace("repeats = 1", "repeats = 2"))
    with pytest.raises(lab.resume.SweepRefused, match="recipe content") as err:
        lab.sweep("fastsim", f"{DT}=40,80", results=results, progress=False)
    assert "dt-40" in str(err.value) and "--fresh" in str(err.value)
    assert _run_dirs(results) == before  # refused before anything booted
    sw = lab.sweep("fastsim", f"{DT}=40,80", results=results, fresh=True, progress=False)
    assert [p.status for p in sw.record.points] == ["measured", "measured"]
    assert len(_run_dirs(results)) == len(before) + 2  # the old runs stay; the record lists the new ones
    assert not set(sw.record.points[0].runs) & {d.name for d in before}


def test_a_point_whose_boot_fails_is_recorded_and_the_rest_run(recipes, tmp_path):
    results = tmp_path / "results"
    over = [f"{DT}=40,80,160", f'engine.args."--fault-boot-crash"="","{OOM}",""']
    sw = lab.sweep("fastsim", over, zipped=True, results=results, progress=False)
    statuses = [p.status for p in sw.record.points]
    assert statuses == ["measured", "failed", "measured"]
    bad = sw.record.points[1]
    assert bad.reason.startswith("boot failed") and "OutOfMemoryError" in bad.reason
    assert read_sweep(sw.path).points[1].reason == bad.reason
    failed = [json.loads((d / "run.json").read_text()) for d in _run_dirs(results)]
    assert sorted(r["status"] for r in failed) == ["complete", "complete", "failed"]
    with pytest.raises(LabkitError, match="1 of 3 sweep points failed: dt-80_fbc-"):
        sw.check()  # what the notebook's last cell calls
    # a re-run measures the failed point again and skips the others
    sw2 = lab.sweep("fastsim", over, zipped=True, results=results, progress=False)
    assert [p.status for p in sw2.record.points] == ["resumed", "failed", "resumed"]


def test_a_point_failing_on_a_shared_boot_ends_that_boot(recipes, tmp_path):
    results = tmp_path / "results"
    # both points change only measure.*, so they share one boot; the first asks for more tokens than the
    # sim's 8192-token context holds, so every request of it is refused (HTTP 400)
    over = ["measure.decode.output_tokens=9000,16", "measure.prefill.prompt_tokens=[9000],[512]"]
    sw = lab.sweep("fastsim", over, zipped=True, results=results, progress=False)
    (bad, after) = sw.record.points
    assert bad.status == "failed" and "no request succeeded" in bad.reason
    assert (after.status, after.reason) == (
        "failed",
        f"not measured: point {bad.variant_id} failed on their shared boot",
    )
    assert not (results / "fastsim" / after.variant_id).exists()  # never run after its boot broke
    assert [json.loads(p.read_text())["status"] for p in results.glob("*/*/*/run.json")] == ["failed"]


def test_two_keys_with_one_short_name_never_share_a_lane_folder(recipes, tmp_path):
    results = tmp_path / "results"
    lab.sweep("fastsim", f"{DT}=40", results=results, progress=False)
    before = _run_dirs(results)
    with pytest.raises(
        RecipeError, match="holds a sweep over engine.args.--decode-tps under the short name 'dt'"
    ):
        lab.sweep("fastsim", "engine.env.DT=40", results=results, progress=False)
    assert _run_dirs(results) == before
    sw = lab.sweep("fastsim", "envdt:engine.env.DT=40", results=results, progress=False)
    assert [p.variant_id for p in sw.record.points] == ["envdt-40"]
    with pytest.raises(RecipeError, match="share the short name 'dt'"):
        lab.sweep("fastsim", [f"{DT}=40", "engine.env.DT=1"], results=results, progress=False)


@pytest.mark.parametrize(
    ("over", "says"),
    [
        ("engine.argz.x=1", "engine.argz"),
        ("measure.decode.turns=2,-1", "measure.decode.turns"),
        (f"{DT.replace('tps', 'tsp')}=40", "did you mean --decode-tps"),
    ],
)
def test_a_bad_key_value_or_flag_fails_before_any_boot(recipes, tmp_path, over, says):
    results = tmp_path / "results"
    with pytest.raises(RecipeError, match=says) as err:
        lab.sweep("fastsim", over, results=results, progress=False)
    assert "recipe.toml" in str(err.value) or "--over" in str(err.value)
    assert not results.exists() or _run_dirs(results) == []


def test_cli_dry_run_lists_points_and_boots(recipes, capsys):
    assert (
        main(["sweep", "fastsim", "--over", f"{DT}=40,80", "--over", "measure.decode.turns=1,2", "--dry-run"])
        == 0
    )
    out = capsys.readouterr().out
    assert out.count("boot ") == 2 and "dt-40_turns-1" in out and "dt-80_turns-2" in out


def test_cli_sweep_prints_the_table_and_writes_the_plot(recipes, tmp_path, capsys):
    results = tmp_path / "results"
    code = main(["sweep", "fastsim", "--over", f"{DT}=40,80", "--results", str(results)])
    out = capsys.readouterr().out
    assert code == 0 and "--decode-tps" in out and "sweep record:" in out
    plot = results / "plots" / "sweep-fastsim-default_over_dt.png"
    assert plot.is_file() and f"plot: {plot}" in out
    assert (results / "_sweeps" / "fastsim" / "default_over_dt.json").is_file()


MNBT = 'engine.args."--max-num-batched-tokens"'
ARRIVING = (
    "interference = { prompt_tokens = [2000], streams = 2, stream_tokens = 160, warm_tokens = 8, arrivals = 2, "
    "spacing_s = 0.3 }"
)


def test_a_budget_sweep_shows_the_prefill_trade_off_in_its_table_and_plot(tmp_path, monkeypatch, capsys):
    """The simulator's known trade-off (docs/measurement.md, "Prefill under decode"): the whole 2,000-token
    prompt in one step (budget 8192) gives the arrival its first token sooner and the streams one long gap;
    steps of 512 tokens spread the same stall over shorter gaps. The table shows TTFT and the stall per point
    and the plot has the trade-off plane."""
    from labkit import report

    root = tmp_path / "recipes"
    sim_recipe(root / "arrivals", port=PORT + 1, measure=ARRIVING)
    monkeypatch.setenv("LABKIT_RECIPES", str(root))
    results = tmp_path / "results"
    code = main(["sweep", "arrivals", "--over", f"{MNBT}=512,8192", "--results", str(results)])
    out = capsys.readouterr().out
    assert code == 0
    assert "arrival TTFT under decode, 2,000 (s)" in out and "decode stall per 2,000 arrival (s)" in out
    m = load_results(results).measures
    fig = {k: dict(zip(m[m["measure"] == k]["variant"], m[m["measure"] == k]["value"], strict=True)) for k in (
        "interference_2000_ttft", "interference_2000_gap_max", "interference_2000_stall")}  # fmt: skip
    ttft, gap, stall = fig.values()
    assert ttft["mnbt-512"] > ttft["mnbt-8192"]
    assert gap["mnbt-512"] < 0.5 * gap["mnbt-8192"]
    assert stall["mnbt-512"] == pytest.approx(stall["mnbt-8192"], rel=0.2)
    record = read_sweep(results / "_sweeps" / "arrivals" / "default_over_mnbt.json")
    titles = [ax.get_title() for ax in report.sweep_figure(record, load_results(results)).axes]
    assert any(t.startswith("the trade-off: 2,000-token prompts") for t in titles)


def test_a_sweep_with_load_levels_draws_vllms_view_per_point_and_level(tmp_path, monkeypatch):
    """vLLM's plot_pareto plane: a marker per point and closed-loop level, at output tokens/s per GPU (one
    node, one GPU: the level's rate) and per user (the rate over its streams)."""
    from labkit import report

    root = tmp_path / "recipes"
    load = "load = { concurrency = [1, 2], requests = 4, prompt_tokens = 64, output_tokens = 16 }"
    sim_recipe(root / "levels", port=PORT + 2, measure=load)
    monkeypatch.setenv("LABKIT_RECIPES", str(root))
    results = tmp_path / "results"
    sw = lab.sweep("levels", f"{MNBT}=256,8192", results=results, progress=False)
    data = load_results(results)
    (ax,) = [a for a in report.sweep_figure(sw.record, data).axes if a.get_title().startswith("vLLM's view")]
    # a label per spot: the two budgets' levels may land on one (decode alone does not feel the budget)
    labels = sorted(name for t in ax.texts for name in t.get_text().split(" / "))
    assert labels == ["256, c1", "256, c2", "8192, c1", "8192, c2"]
    m = data.measures
    rate = m[(m["variant"] == "mnbt-256") & (m["measure"] == "load_output_tps@load=2")]["value"].iloc[0]
    spot = next(t for t in ax.texts if "256, c2" in t.get_text()).xy
    assert spot == pytest.approx((rate, rate / 2), rel=0.02)


def test_cli_sweep_exits_1_naming_a_failed_point(recipes, tmp_path, capsys):
    over = ["--over", f"{DT}=40,80", "--over", f'engine.args."--fault-boot-crash"="","{OOM}"', "--zip"]
    code = main(["sweep", "fastsim", *over, "--results", str(tmp_path / "results")])
    captured = capsys.readouterr()
    assert code == 1 and "point dt-80_fbc-" in captured.err and "OutOfMemoryError" in captured.err
    assert "failed" in captured.out  # the table shows the point, failed


def test_sweep_notebook_runs_a_sweep_by_papermill(recipes, tmp_path):
    import nbformat

    from labkit import notebooks

    results = tmp_path / "results"
    params = {"recipe": "fastsim", "over": f"{DT}=40,80 ; measure.decode.turns=1", "results": str(results)}
    out = notebooks.execute(
        "sweep", params, tmp_path / "nb" / "sweep-out.ipynb", progress=False, log_output=False
    )
    record = read_sweep(results / "_sweeps" / "fastsim" / "default_over_dt-turns.json")
    assert [p.variant_id for p in record.points] == ["dt-40_turns-1", "dt-80_turns-1"]
    assert all(p.status == "measured" for p in record.points)
    outputs = [
        o
        for c in nbformat.read(out, as_version=4).cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    ]
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "--decode-tps" in html and "fastsim/default_over_dt-turns" in html
    assert any("image/png" in o.get("data", {}) for o in outputs)
    # a logged run prints each figure's text: its name, not matplotlib's repr
    texts = ["".join(o.get("data", {}).get("text/plain", "")) for o in outputs]
    assert "[plot: sweep]" in texts and not any(t.startswith("<Figure") for t in texts)
    assert (results / "plots" / "sweep-fastsim-default_over_dt-turns.png").is_file()


def test_unreachable_nodes_refuse_the_sweep_before_any_record_or_run(tmp_path, monkeypatch):
    from labkit.errors import NodeError

    root = tmp_path / "recipes"
    sim_recipe(root / "farsim", port=PORT, nodes=("127.0.0.250",), ssh_port=1)  # nothing listens there
    monkeypatch.setenv("LABKIT_RECIPES", str(root))
    results = tmp_path / "results"
    with pytest.raises(NodeError, match="127.0.0.250"):
        lab.sweep("farsim", f"{DT}=40,80", results=results, progress=False)
    assert not results.exists() or not any(results.rglob("*.json"))
