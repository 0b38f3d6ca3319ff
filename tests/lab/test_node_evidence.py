"""Node evidence through lab.measure: a sim lane here records memory samples and "no GPU telemetry" once; on
the four sshd nodes with the nvidia-smi shim a run stores each node's power/clock series, joules per token,
flags the node whose SM clock is below its baseline, marks it in the tables, and moves only the healthy
nodes' baselines; the KV pool at boot comes from the log and the API."""

from __future__ import annotations

import csv
import io
import json

from labkit import lab, report
from labkit.store import read_baselines, update_baselines
from tests.support.lanes import sim_recipe
from tests.support.telemetry_nodes import gpu_row, set_gpu

PORT_LOCAL, PORT_CLUSTER = 18785, 18786


def _doc(run_dir):
    return json.loads((run_dir / "run.json").read_text())


def test_a_sim_lane_here_records_memory_and_no_gpu_telemetry_once(tmp_path, monkeypatch):
    sim_recipe(tmp_path / "recipes" / "memsim", port=PORT_LOCAL, measure="telemetry_period = 0.2")
    monkeypatch.setenv("LABKIT_RECIPES", str(tmp_path / "recipes"))
    done = lab.measure(lab.plan("memsim"), results=tmp_path / "results", progress=False)
    doc = _doc(done.run_dirs[0])
    node = doc["summary"]["telemetry"]["nodes"]["localhost"]
    assert node["gpu"].startswith("not available: ") and node["memory"] == "/proc/meminfo"
    assert node["memory_samples"] > 0
    decode = doc["summary"]["telemetry"]["decode"]["nodes"]["localhost"]
    assert decode["mem_available_min_bytes"] > 0 and "power_mean_w" not in decode  # never zeros
    assert "energy_per_token_decode" not in doc["summary"]["measures"]
    rows = list(csv.DictReader(io.StringIO((done.run_dirs[0] / "telemetry-localhost.csv").read_text())))
    assert rows and all(r["mem_available_kb"] for r in rows if r["source"] == "meminfo")
    assert "telemetry-localhost.csv" in doc["files"]
    assert read_baselines(tmp_path / "results", ["localhost"]) == {}  # no GPU, no clock baseline
    lines = lab.figures(done, tmp_path / "results")["nodes"].axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["localhost (no GPU)"]  # memory, never a zero power line
    pool = doc["boot"]["kv_pool"]
    assert pool["tokens"] == doc["summary"]["measures"]["kv_pool_tokens"] and not pool["disagree"]
    assert {"log", "cache_config_info"} <= set(pool["sources"])
    assert doc["provenance"]["kv_pool"] == pool  # the boot's reading, not read again for every run


def test_four_nodes_flag_the_low_clock_node_and_move_only_healthy_baselines(cluster, tmp_path):
    a, b, c, d = cluster.addresses
    for addr in (a, b, d):
        set_gpu(cluster, addr, series=[gpu_row(30.0, 2400), gpu_row(40.0, 2400)])
    set_gpu(cluster, c, series=[gpu_row(14.0, 600)])  # stuck in a low-power state
    results = tmp_path / "results"
    update_baselines(results, {addr: 2400.0 for addr in cluster.addresses}, "earlier-healthy-run")
    try:
        plan = sim_recipe(
            tmp_path / "lane4",
            PORT_CLUSTER,
            nodes=cluster.addresses,
            runtime="docker",
            ssh_port=cluster.port,
            user=cluster.user,
            measure="telemetry_period = 0.2",
        )
        done = lab.measure(plan, results=results, ssh=cluster.ssh_options(), progress=False)
    finally:
        cluster.reset_shims()
    doc = _doc(done.run_dirs[0])
    s = doc["summary"]
    low = [f for f in s["flags"] if f["code"] == "low-clock"]
    assert low and all(f["message"].startswith(f"{c}: ") for f in low)
    assert {f["window"] for f in low} >= {"decode"}
    assert s["measures"]["energy_per_token_decode"] > 0 and s["measures"]["sm_clock_decode_median"] == 600
    for addr in cluster.addresses:
        assert (done.run_dirs[0] / f"telemetry-{addr}.csv").is_file()
        assert s["telemetry"]["nodes"][addr]["gpu"] == "nvidia-smi"
    # the stuck node's baseline is not dragged down; the healthy ones took this run in
    assert read_baselines(results, [c]) == {c: 2400.0}
    runs = json.loads((results / "_baselines" / f"{a}.json").read_text())["runs"]
    assert [r["run"] for r in runs] == ["earlier-healthy-run", done.run_ids[0]]
    # the tables mark the lane's decode figures and say why
    (table,) = lab.tables(done, results)
    text = report.to_text(table)
    assert "†" in text and "low-clock" in text and c in text
    assert "energy per decode token (J, all nodes)" in text and "SM clock in decode" in text
    figs = lab.figures(done, results)  # each node's power and clock beside the tokens plot
    ax_power = figs["nodes"].axes[0]
    assert sorted(line.get_label() for line in ax_power.get_lines()) == sorted(cluster.addresses)
    mem = doc["boot"]["memory_at_boot"]
    assert set(mem) == set(cluster.addresses) and all(
        m["after_ready"]["MemAvailable"] > 0 for m in mem.values()
    )
