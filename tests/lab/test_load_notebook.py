"""The bench notebook's `load` parameter (docs/measurement.md, "Serving under load"): papermill, a real kernel, a
sim lane; the executed notebook shows the table "Latency and throughput under load" with a row per level, and the
stored run holds each level's percentiles and its per-request records."""

from __future__ import annotations

from labkit import notebooks as nbk
from labkit.store import load_results
from tests.support.lanes import papermill_bench, sim_recipe
from tests.support.workers import free_port

PORTS = (18960, 18979)  # this file's sim ports, clear of the other tests' ranges
LOAD = "[measure.load]\nconcurrency = [2]\nprompt_tokens = 64\noutput_tokens = 16\nrequests = 8\n[measure.slo]\nttft_s = 1.0"


def test_papermill_with_a_load_parameter_shows_the_table_under_load(tmp_path):
    recipes = tmp_path / "recipes"
    sim_recipe(recipes / "loadsim", port=free_port(*PORTS), extra=LOAD)
    proc, out = papermill_bench(tmp_path, recipes, "-p", "recipe", "loadsim", "-p", "load", "1,4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (table,) = [t for t in nbk.shown_tables(out) if t.startswith("Latency and throughput under load")]
    rows = [line for line in table.splitlines() if line.startswith("sim test lane")]
    assert [r.split()[4] for r in rows] == ["c1", "c4"], table
    assert "TTFT p99 (s)" in table and "goodput (req/s)" in table, table
    data = load_results(tmp_path / "results")
    m = data.measures.groupby("measure")["value"].mean()
    assert m["load_peak_concurrency@load=4"] == 4 and m["load_attainment@load=1"] == 1.0
    assert m["load_ttft@load=4@stat=p50"] > 0 and "load_goodput@load=4" in m
    (run,) = data.docs.values()
    assert run.plan.measure["load"]["concurrency"] == [1, 4]  # the override, as the resolved recipe stores it


def test_papermill_with_a_capacity_profile_shows_both_tables_and_the_curve(tmp_path):
    """`-p load capacity:1,2,4`: the search on the lane's SLO; the executed notebook shows the table under load
    and the capacity table, and the run folder gets the latency-throughput curve and the TTFT distribution."""
    recipes = tmp_path / "recipes"
    sim_recipe(recipes / "loadsim", port=free_port(*PORTS), extra=LOAD)
    proc, out = papermill_bench(tmp_path, recipes, "-p", "recipe", "loadsim", "-p", "load", "capacity:1,2,4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    shown = nbk.shown_tables(out)
    (levels,) = [t for t in shown if t.startswith("Latency and throughput under load")]
    (capacity,) = [t for t in shown if t.startswith("Capacity under the SLO")]
    assert "c4" in levels and "capacity (closed-loop streams)" in capacity, capacity
    data = load_results(tmp_path / "results")
    (run,) = data.docs.values()
    assert run.plan.measure["load"]["profile"] == "capacity"
    m = data.measures.groupby("measure")["value"].mean()
    assert m["load_capacity_streams"] == 4  # every rung met a 1 s TTFT bound: the ladder's top, a lower bound
    folder = next((tmp_path / "results").rglob("run.json")).parent
    assert {"latency_throughput.png", "ttft_distribution.png"} <= {p.name for p in folder.rglob("*.png")}
