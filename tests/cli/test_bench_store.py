"""`labkit bench` stores its runs (labkit/lab/endpoint_run.py): a recipe's lane after `labkit up` at its client
address, a recipe's lane at an endpoint labkit did not boot (--url), a bare endpoint under a lane of its own
(--lane); each marked with where its endpoint came from, and shown in the tables like any measured run."""

from __future__ import annotations

import subprocess
import sys

from labkit.sim.oracle import SimOracle
from labkit.store import load_results
from tests.support.lanes import sim_recipe
from tests.support.serving import REPO
from tests.support.workers import free_port

SHORT = ["--turns", "1", "--output-tokens", "12", "--concurrency", "1", "--no-prefill", "-q"]


def _labkit(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "labkit", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def test_up_bench_down_stores_the_run_at_the_lanes_client_address_and_the_tables_show_it(
    tmp_path, local_env, monkeypatch
):
    port = free_port(18330, 18339)
    sim_recipe(tmp_path / "recipes" / "benchlane", port)
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    results = tmp_path / "results"
    up = _labkit("up", "benchlane")
    try:
        assert up.returncode == 0, up.stderr
        bench = _labkit("bench", "benchlane", "--results", str(results), *SHORT)
    finally:
        down = _labkit("down", "benchlane")
    assert down.returncode == 0, down.stderr
    assert local_env.processes() == []
    assert bench.returncode == 0, bench.stderr
    assert "stored: " in bench.stderr and "decode c1" in bench.stdout
    data = load_results(results)
    (doc,) = data.docs.values()
    assert (doc.recipe, doc.variant_id, doc.status, doc.source) == (
        "benchlane",
        "default",
        "complete",
        "measured",
    )
    prov = doc.provenance.raw
    assert prov["endpoint"] == f"http://localhost:{port}/v1"  # the client address, as labkit show prints it
    assert prov["endpoint_origin"] == "lane" and "booted before this run" in prov["endpoint_note"]
    assert doc.summary.measures["decode_c1"] > 0
    # the tables read it like any measured run
    report = _labkit("report", "--results", str(results), "--tables", str(REPO / "results" / "tables.toml"))
    assert report.returncode == 0, report.stderr
    text = (results / "TABLES.md").read_text()
    assert "sim test lane" in text


def test_a_recipe_at_a_given_url_and_a_bare_endpoint_under_a_lane_are_stored_and_marked(tmp_path):
    results = tmp_path / "results"
    with SimOracle(sets={"decode_tps": 300}) as sim:
        given = _labkit(
            "bench", "sim", "--url", sim.url, "--cold", "--results", str(results), "--runs", "2", *SHORT
        )
        bare = _labkit(
            "bench", sim.url, "--lane", "my-endpoint", "--model-loops", "--results", str(results), *SHORT
        )
        loose = _labkit("bench", sim.url, "--results", str(results), *SHORT)
    assert given.returncode == 0, given.stderr
    assert bare.returncode == 0, bare.stderr
    assert loose.returncode == 0 and "not stored: give --lane NAME" in loose.stderr
    docs = sorted(load_results(results).docs.values(), key=lambda d: (d.recipe, d.run_id))
    assert [(d.recipe, d.variant_id) for d in docs] == [
        ("my-endpoint", "endpoint"),
        ("sim", "spec-none"),
        ("sim", "spec-none"),
    ]
    lone = docs[0]
    # in the order the command stored them: two short runs can start within one second, where run ids (a
    # second's timestamp and a random suffix) do not say which came first
    order = [line.rsplit("/", 1)[1] for line in given.stderr.splitlines() if line.startswith("stored: ")]
    first, second = sorted(docs[1:], key=lambda d: order.index(d.run_id))
    # --runs 2: one folder per repetition, as `labkit run` stores them; only the first meets a cold engine
    assert [first.provenance.raw["cold_expected"], second.provenance.raw["cold_expected"]] == [True, False]
    assert first.provenance.raw["endpoint_origin"] == "url"
    assert "did not boot it" in first.provenance.raw["endpoint_note"]
    assert first.boot.raw["source"] == "not booted by this run"
    assert lone.provenance.raw["endpoint_origin"] == "bare" and lone.simulated
    assert lone.provenance.raw["loops_expected"] is True and lone.label == "my-endpoint"


def test_bench_storing_refuses_bad_combinations_before_measuring(tmp_path):
    results = tmp_path / "results"
    named = _labkit("bench", "http://127.0.0.1:1", "--lane", "sim", "--results", str(results))
    assert named.returncode == 1 and "--lane 'sim' names the recipe 'sim'" in named.stderr
    lane = _labkit("bench", "sim", "--lane", "x", "--results", str(results))
    assert lane.returncode == 1 and "--lane names a bare endpoint's lane" in lane.stderr
    loops = _labkit("bench", "sim", "--model-loops", "--results", str(results))
    assert loops.returncode == 1 and "model.loops" in loops.stderr
    json_runs = _labkit(
        "bench", "sim", "--runs", "2", "--json", str(tmp_path / "r.json"), "--results", str(results)
    )
    assert json_runs.returncode == 1 and "--runs 1 or --no-store" in json_runs.stderr
    assert not results.exists()
