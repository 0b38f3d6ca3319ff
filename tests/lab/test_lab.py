"""labkit.lab end to end on the simulator: plan -> up -> measure -> store -> tables, and the bench notebook."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from labkit import lab
from labkit.errors import LabkitError, NodeError, RecipeError
from labkit.measure import WORKLOADS
from labkit.store import load_results
from tests.support.lanes import sim_recipe
from tests.support.workers import RECIPE_SIM

ROOT = Path(__file__).resolve().parents[2]
PORT = 18290


def _recipes(tmp_path: Path, port: int = PORT, **kw) -> Path:
    root = tmp_path / "recipes"
    sim_recipe(root / "fastsim", port=port, **kw)
    return root


def test_plan_overrides_and_optional_axes(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RECIPES", str(_recipes(tmp_path)))
    plan = lab.plan("fastsim", spec="none", nodes="a, b", runs=3)  # no spec axis: "none" is ignored
    assert plan.cluster.nodes == ("a", "b") and plan.measure.runs == 3
    with pytest.raises(RecipeError, match="no variant axis 'spec'"):
        lab.plan("fastsim", spec="dspark")


def test_plan_on_shipped_recipes():
    assert lab.plan("sim", spec="dspark").engine.arg("--preset") == ("dsv41-stock-dspark",)
    assert lab.resolve.spec_k(lab.plan("dsv41", spec="dspark")) == 5
    assert lab.resolve.spec_k(lab.plan("prod")) == 5
    assert lab.resolve.spec_k(lab.plan("dsv41")) is None
    text = lab.describe(lab.plan("dsv41", spec="dspark"))
    assert "[dgx8]" in text and "--headless" in text


def test_measure_stores_complete_runs_and_tears_down(tmp_path, monkeypatch):
    monkeypatch.setenv("LABKIT_RECIPES", str(_recipes(tmp_path)))
    results = tmp_path / "results"
    plan = lab.plan("fastsim", runs=2)
    done = lab.measure(plan, results=results, progress=False)
    assert len(done.run_dirs) == 2 and done.boot.kv_pool_tokens == 100_000
    data = load_results(results)
    assert sorted(data.runs["status"]) == ["complete", "complete"]
    first = json.loads((done.run_dirs[0] / "run.json").read_text())
    second = json.loads((done.run_dirs[1] / "run.json").read_text())
    assert first["summary"]["measures"]["kv_pool_tokens"] == 100_000
    # a cold figure, or a note saying why there is none (absent, not None, when the cold turn was not told apart:
    # it failed so in CI beside two other workers)
    assert first["summary"]["measures"].get("decode_c1_cold") is not None or first["summary"]["notes"]
    assert "decode_c1_cold" not in {k for k, v in second["summary"]["measures"].items() if v is not None}
    assert second["boot_run"] == first["run_id"]
    assert (done.run_dirs[0] / "logs").is_dir() and (done.run_dirs[0] / "boot.json").is_file()
    assert "boot.json" in first["files"] and "logs/localhost.log" in first["files"]  # the lane's files too
    requests = data.requests(done.run_ids[:1])
    assert len(requests) and requests["chunk_t"].iloc[-1].startswith("[")  # per-chunk stamps as JSON
    # runs = 2 means two folders of one plan each, not two folders of two plans each
    assert set(data.requests(done.run_ids)["rep"]) == {0}
    # the lane is gone: its port refuses connections
    import socket

    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", PORT), timeout=1):
        pass
    tables = lab.tables(done, results)
    assert tables and "sim test lane (sim)" in tables[0].frame.columns[0]


def test_measure_failure_marks_run_failed(tmp_path, monkeypatch):
    monkeypatch.setenv(
        "LABKIT_RECIPES",
        str(
            _recipes(
                tmp_path,
                port=PORT + 1,
                settings={"fault_boot_crash": "RuntimeError: Engine core initialization failed (simulated)"},
            )
        ),
    )
    results = tmp_path / "results"
    with pytest.raises(Exception, match="initialization failed"):
        lab.measure(lab.plan("fastsim"), results=results, progress=False)
    data = load_results(results, include_incomplete=True)
    assert list(data.runs["status"]) == ["failed"]


def _measure_fails(results: Path, error: type[BaseException], match: str) -> tuple[Path, dict]:
    """lab.measure of the fastsim lane raises; its one run folder is stored failed: (folder, run.json)."""
    with pytest.raises(error, match=match):
        lab.measure(lab.plan("fastsim"), results=results, progress=False)
    data = load_results(results, include_incomplete=True)
    assert list(data.runs["status"]) == ["failed"]
    run_dir = data.docs[data.runs["run"].iloc[0]].path
    return run_dir, json.loads((run_dir / "run.json").read_text())


def test_a_run_where_every_request_failed_is_failed_not_complete(tmp_path, monkeypatch):
    # a context of 8 tokens: the engine stays up and answers every request of the plan with HTTP 400
    monkeypatch.setenv(
        "LABKIT_RECIPES", str(_recipes(tmp_path, port=PORT + 4, settings={"max_model_len": 8}))
    )
    run_dir, doc = _measure_fails(tmp_path / "results", LabkitError, "no request succeeded")
    assert "no request succeeded" in doc["error"] and (run_dir / "requests.csv").is_file()


def test_failure_halfway_keeps_the_measured_requests_in_the_failed_run(tmp_path, monkeypatch):
    async def boom(session, rep):
        raise RuntimeError("prompt sizing broke")

    monkeypatch.setitem(WORKLOADS, "prefill", dataclasses.replace(WORKLOADS["prefill"], run=boom))
    monkeypatch.setenv("LABKIT_RECIPES", str(_recipes(tmp_path, port=PORT + 3)))
    run_dir, doc = _measure_fails(tmp_path / "results", RuntimeError, "prompt sizing broke")
    assert "prompt sizing broke" in doc["error"] and doc["partial"]["requests"] > 0
    assert (run_dir / "requests.csv").read_text().count("\n") == doc["partial"]["requests"] + 1  # + header


def test_unreachable_nodes_fail_fast_and_create_nothing(tmp_path):
    t = time.monotonic()
    with pytest.raises(NodeError) as info:
        lab.measure(lab.plan("dsv41", spec="dspark"), results=tmp_path / "results", progress=False)
    assert time.monotonic() - t < 30
    assert all(node in str(info.value) for node in ("dgx5", "dgx6", "dgx7", "dgx8"))
    assert not (tmp_path / "results").exists()


def test_papermill_output_path_parsing():
    pm = ["/v/bin/python", "/v/bin/papermill"]
    assert lab.papermill.papermill_output_path(
        pm + ["nb.ipynb", "o.ipynb", "-p", "recipe", "sim"], Path("/w")
    ) == Path("/w/o.ipynb")
    assert lab.papermill.papermill_output_path(
        pm + ["-p", "a", "1", "nb.ipynb", "/x/o.ipynb"], Path("/w")
    ) == Path("/x/o.ipynb")
    assert lab.papermill.papermill_output_path(pm + ["nb.ipynb"], Path("/w")) is None
    assert lab.papermill.papermill_output_path(["/usr/bin/python", "x.py"], Path("/w")) is None


def _papermill(args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    papermill = str(Path(sys.executable).with_name("papermill"))
    return subprocess.run(
        [papermill, str(ROOT / "notebooks" / "bench.ipynb"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _env(tmp_path: Path, **extra: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LABKIT_RESULTS": str(tmp_path / "results"), **extra}
    env.pop("LABKIT_BATCH", None)
    return env


def test_bench_notebook_dry_run_contacts_nothing(tmp_path):
    r = _papermill(
        ["out.ipynb", "-p", "recipe", "dsv41", "-p", "spec", "dspark", "-p", "dry_run", "True"],
        tmp_path,
        _env(tmp_path),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    text = (tmp_path / "out.ipynb").read_text()
    assert "--speculative-config" in text and "[dgx5]" in text
    assert not (tmp_path / "results").exists()


def test_bench_notebook_unreachable_nodes_named(tmp_path):
    t = time.monotonic()
    r = _papermill(["out.ipynb", "-p", "recipe", "dsv41"], tmp_path, _env(tmp_path))
    assert r.returncode != 0 and time.monotonic() - t < 60
    assert "dgx7" in (tmp_path / "out.ipynb").read_text()


@pytest.mark.xdist_group(RECIPE_SIM)  # the shipped sim recipe's port (tests/support/workers.py)
def test_users_papermill_command_leaves_a_complete_run(tmp_path):
    """The README's command, from another working directory: sim lane with DSpark, real kernel, real engine."""
    r = _papermill(["out.ipynb", "-p", "recipe", "sim", "-p", "spec", "dspark"], tmp_path, _env(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    data = load_results(tmp_path / "results")
    assert list(data.runs["status"]) == ["complete"] and data.runs["simulated"].all()
    run_dir = data.docs[data.runs["run"].iloc[0]].path
    assert {"run.json", "requests.csv", "bench.ipynb", "boot.json"} <= {p.name for p in run_dir.iterdir()}
    m = data.measures.set_index("measure")["value"]
    assert 45 < m["decode_c1"] < 60 and 600 * 0.95 < m["prefill_4096"] < 605 * 1.05
    assert 4.0 < m["accept_per_draft"] <= 5 and m["accept_k"] == 5
    assert (run_dir / "bars.png").is_file()
    listed = json.loads((run_dir / "run.json").read_text())["files"]
    assert {"bars.png", "prefill.png", "tokens.png", "bench.ipynb"} <= set(listed)  # every file is on record


def test_pin_revision_resolves_refs_on_the_head(tmp_path):
    from labkit.errors import LabkitError
    from labkit.nodes.local import LocalHost
    from labkit.serve.plan import pin_revision

    plan = lab.plan("dsv41")
    cache = tmp_path / "hub"
    plan = dataclasses.replace(plan, cluster=dataclasses.replace(plan.cluster, shared_cache=str(cache)))
    repo = cache / plan.model.cache_dir_name
    head = LocalHost("localhost")
    with pytest.raises(LabkitError, match=r"localhost: cannot resolve model revision 'main'.*refs/main"):
        pin_revision(plan, head)
    (repo / "refs").mkdir(parents=True)
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs" / "main").write_text(commit + "\n")
    pinned = pin_revision(plan, head)
    assert pinned.model_path == f"{repo}/snapshots/{commit}"
    assert pin_revision(pinned, head) is pinned  # already a commit: nothing to do
    view = lab.plan("dsv41", staging="local-view")
    assert pin_revision(view, head) is view  # the staged view resolves its own revision


def _view_recipe(tmp_path: Path, port: int) -> tuple[Path, Path]:
    """A sim lane whose model is a local-view of a fake HF cache: (cache, view dst)."""
    from tests.support.hf_cache import LOCAL, REPO, make_cache

    cache = tmp_path / "hub"
    make_cache(cache)
    dst = tmp_path / "view"
    root = tmp_path / "recipes"
    sim_recipe(root / "viewsim", port=port)
    text = (root / "viewsim" / "recipe.toml").read_text()
    text = text.replace('repo = "labkit/sim-test"', f'repo = "{REPO}"')
    text += (
        f'shared_cache = "{cache}"\n\n[[staging]]\nkind = "local-view"\nrepo = "{REPO}"\n'
        f'dst = "{dst}"\nlocal = {json.dumps(list(LOCAL))}\n'
    )
    (root / "viewsim" / "recipe.toml").write_text(text)
    return cache, dst


def test_measure_stages_the_view_before_boot(tmp_path, monkeypatch):
    """A lane that declares a local-view: staged, verified, then booted and measured; the report is stored."""
    from tests.support.hf_cache import COMMIT, LOCAL, REPO

    cache, dst = _view_recipe(tmp_path, PORT + 2)
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    plan = lab.plan("viewsim")
    assert plan.model_path == str(dst)
    done = lab.measure(plan, results=tmp_path / "results", progress=False)
    staged = json.loads((done.run_dirs[0] / "staging.json").read_text())
    assert staged and done.staging is not None
    for name in LOCAL:
        assert (dst / name).is_file() and not (dst / name).is_symlink()
    assert (dst / "config.json").is_symlink()
    assert os.readlink(dst / "config.json").startswith(
        str(cache / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT)
    )
    assert json.loads((done.run_dirs[0] / "run.json").read_text())["status"] == "complete"


def test_a_lane_already_up_is_refused_before_its_view_is_restaged(tmp_path, monkeypatch):
    """`labkit up` kept the lane running; measuring or staging it again must not touch the view under it."""
    from labkit.cli import main
    from labkit.serve import Lane
    from labkit.serve.errors import LaneBusy
    from tests.support.hf_cache import LOCAL

    _, dst = _view_recipe(tmp_path, PORT + 5)
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    monkeypatch.setenv("LABKIT_STATE_DIR", str(tmp_path / "state"))
    plan = lab.plan("viewsim")
    assert main(["stage", "viewsim"]) == 0
    kept = Lane(plan, progress=None)
    kept.start()
    try:
        shard = dst / LOCAL[0]
        shard.write_bytes(b"X" + shard.read_bytes()[1:])  # staging would repair this byte
        before = shard.read_bytes()
        with pytest.raises(LaneBusy):
            lab.measure(plan, results=tmp_path / "results", progress=False)
        assert main(["stage", "viewsim"]) == 1
        assert main(["up", "viewsim"]) == 1
        assert shard.read_bytes() == before  # nothing re-staged
        assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("run.json"))
    finally:
        kept.down()
        kept.close()


def test_a_nodes_override_is_validated_like_the_recipe():
    """TP4 on three one-GPU nodes is refused (it used to yield --nnodes 3), and so is a name that is no host."""
    with pytest.raises(LabkitError, match=r"nodes override: dgx5, dgx6, dgx7"):
        lab.plan("dsv41", nodes="dgx5,dgx6,dgx7")
    with pytest.raises(LabkitError, match="cluster.nodes"):
        lab.plan("dsv41", nodes="dgx5;id,dgx6,dgx7,dgx8")
    ok = lab.plan("dsv41", nodes="dgx1,dgx2,dgx3,dgx4")
    assert ok.cluster.nodes == ("dgx1", "dgx2", "dgx3", "dgx4")


def test_lab_tables_label_interval_rows_by_boot_like_labkit_report(tmp_path):
    """The notebook's tables (lab.tables) get the stored boot facts as `labkit report` does: three runs on one
    boot are "runs on one boot" (tagged "n=3 runs, 1 boot"), not the "runs" of a record that does not say."""
    from tests.report.test_intervals import TABLES, store_run

    root = tmp_path / "results"
    dirs = [store_run(root, "20261201T000001Z-aaaaa1", {"decode_c1": 48.0}, cold=True)]
    for i, v in ((2, 52.0), (3, 50.0)):
        dirs.append(store_run(root, f"20261201T00000{i}Z-aaaaa{i}", {"decode_c1": v}, boot_run=dirs[0].name))
    (root / "tables.toml").write_text(
        TABLES.format(interval='interval = "pm"').replace('id = "m"', 'id = "measured"')
    )
    done = lab.runs.LaneRun(plan=lab.plan("sim"), run_dirs=dirs)
    [table] = lab.tables(done, root)
    [lane] = table.lanes
    assert lane.unit == "runs on one boot"
    assert '"n=… runs, 1 boot"' in table.notes[0]  # the tag beside each interval, explained in the note
