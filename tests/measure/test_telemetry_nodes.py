"""Node telemetry for real (docs/measurement.md, "Node telemetry"): the simulator measured while one sampler
per node runs on the four sshd nodes, whose nvidia-smi shim prints the real tool's loop-mode CSV (a healthy
GPU, a throttled one behind an older driver, a low-clock one and one whose driver does not answer), and on
this machine, which has no nvidia-smi. /proc/meminfo is the real one everywhere. Afterwards no sampler may be
left on any node, also when the run failed halfway or labkit never asked the samplers to stop.

Simulators start on a free port of their own choosing (`--port 0`).
"""

from __future__ import annotations

import csv
import dataclasses
import glob
import io
import os
import subprocess
import sys
import time

import pytest

from labkit.measure import WORKLOADS, BenchOptions, NodeTelemetry, healthy_clocks, run_bench
from labkit.nodes.local import LocalHost
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from labkit.sim.process import SimProcess
from tests.support.telemetry_nodes import (
    GB10_DRIVER_FAILURE,
    gpu_row,
    sampler_processes,
    set_gpu,
    ssh_hosts,
    without_nvidia_smi,
)

HEALTHY, THROTTLED, LOW, BROKEN = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"
PERIOD = 0.2
PLAN = MeasurePlan("chat", 1, DecodePlan((1, 2), 3, 64, 1), PrefillPlan((300,), 1), 20.0)


@pytest.fixture
def gpus(cluster):
    """dgx5 healthy (power alternating 30/40 W), dgx6 at its power cap behind a driver that only knows the
    clocks_throttle_reasons.* spelling, dgx7 stuck at 600 MHz, dgx8 with a driver nvidia-smi cannot reach."""
    set_gpu(cluster, HEALTHY, series=[gpu_row(30.0, 2400), gpu_row(40.0, 2400)])
    set_gpu(
        cluster, THROTTLED, series=[gpu_row(95.0, 2300, reasons=0x4 | 0x8)], reject=["clocks_event_reasons"]
    )
    set_gpu(cluster, LOW, series=[gpu_row(14.0, 600, temp=48)])
    set_gpu(cluster, BROKEN, fail=GB10_DRIVER_FAILURE)
    yield cluster
    cluster.reset_shims()


def _no_sampler_left(cluster, sampler: NodeTelemetry) -> None:
    """No sampler script or looping nvidia-smi on any node, and neither its stop nor its pid file."""
    deadline = time.monotonic() + 10
    while sampler_processes(cluster) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sampler_processes(cluster) == []
    assert [p for base in sampler.bases.values() for p in glob.glob(base + ".*")] == []


def _csv(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def _mem_total_kb() -> int:
    with open("/proc/meminfo") as f:
        return int(next(x for x in f if x.startswith("MemTotal:")).split()[1])


def test_four_nodes_give_series_energy_per_token_and_flag_the_low_clock_and_throttled_nodes(gpus):
    cluster = gpus
    hosts = ssh_hosts(cluster)
    baseline = {a: 2400.0 for a in cluster.addresses}
    sampler = NodeTelemetry(hosts, period_s=PERIOD, clock_baseline=baseline)
    try:
        with SimProcess(["--preset", "test"]) as sim:
            res = run_bench(sim.url, PLAN, BenchOptions(progress=False, telemetry=sampler))
    finally:
        for h in hosts:
            h.close()
    t = res.summary.telemetry
    assert t["period_ms"] == 200
    # raw series per node: nvidia-smi's rows as printed (its own timestamp kept) and the real /proc/meminfo
    rows = {a: _csv(res.telemetry[a]) for a in cluster.addresses}
    healthy = [r for r in rows[HEALTHY] if r["source"] == "nvidia-smi"]
    assert {r["power_w"] for r in healthy} == {"30.00", "40.00"} and {r["sm_clock_mhz"] for r in healthy} == {
        "2400"
    }
    assert {r["mem_clock_mhz"] for r in healthy} == {"[N/A]"}  # GB10: no memory clock
    assert healthy[0]["node_time"][:4].isdigit() and healthy[0]["node_time"][4] == "/"
    for a in cluster.addresses:
        mem = [r for r in rows[a] if r["source"] == "meminfo"]
        assert len(mem) >= 2 and {int(r["mem_total_kb"]) for r in mem} == {_mem_total_kb()}
        assert t["nodes"][a]["memory"] == "/proc/meminfo"
    # the driver that does not answer: "not available" once, with its reason, and no GPU row at all
    assert t["nodes"][BROKEN]["gpu"] == f"not available: {GB10_DRIVER_FAILURE}"
    assert t["nodes"][BROKEN]["gpu_samples"] == 0 and not any(
        r["source"] == "nvidia-smi" for r in rows[BROKEN]
    )
    assert t["nodes"][THROTTLED]["reasons_field"] == "clocks_throttle_reasons.active"
    assert t["nodes"][HEALTHY]["reasons_field"] == "clocks_event_reasons.active"
    # the decode window: energy per node, joules per output token over all nodes, clocks and temperatures
    d = t["decode"]
    assert d["token_kind"] == "output" and d["tokens"] > 0
    assert set(d["nodes"][BROKEN]) == {"memory_samples", "mem_available_min_bytes", "flags"}  # never zeros
    gpu_nodes = (HEALTHY, THROTTLED, LOW)
    assert d["joules_per_token"] == pytest.approx(
        sum(d["nodes"][a]["energy_j"] for a in gpu_nodes) / d["tokens"]
    )
    assert 30.0 <= d["nodes"][HEALTHY]["power_mean_w"] <= 40.0
    assert d["nodes"][THROTTLED]["power_mean_w"] == pytest.approx(95.0)
    assert d["nodes"][LOW]["energy_j"] == pytest.approx(14.0 * d["seconds"], rel=1e-6)
    assert d["nodes"][LOW]["sm_clock_median_mhz"] == d["nodes"][LOW]["sm_clock_min_mhz"] == 600
    assert d["nodes"][LOW]["temperature_max_c"] == 48
    assert d["nodes"][HEALTHY]["utilization_mean_pct"] == 90
    m = res.summary.measures
    assert m["energy_per_token_decode"] == d["joules_per_token"] and m["sm_clock_decode_median"] == 600
    assert m["energy_per_token_prefill_300"] == t["prefill_300"]["joules_per_token"]
    assert (
        LOW in res.summary.method["sm_clock_decode_median"]
        and "trapezoid" in res.summary.method["energy_per_token_decode"]
    )
    # health marks: the low-clock node and the throttled one, in every window; the others not
    flags = {(f["code"], f["window"], f["message"].split(":")[0]) for f in res.summary.flags}
    for window in ("decode", "prefill_300"):
        assert ("low-clock", window, LOW) in flags and ("throttled", window, THROTTLED) in flags
    assert not any(node in (HEALTHY, BROKEN) for _, _, node in flags)
    low = next(f for f in res.summary.flags if f["code"] == "low-clock")
    assert "600 MHz" in low["message"] and "75% below its healthy 2400 MHz" in low["message"]
    assert healthy_clocks(t) == {HEALTHY: 2400.0}
    _no_sampler_left(cluster, sampler)


def test_a_cluster_without_nvidia_smi_records_not_available_once_per_node_and_still_samples_memory(cluster):
    hosts = ssh_hosts(cluster)
    sampler = NodeTelemetry(hosts, period_s=PERIOD)
    try:
        with without_nvidia_smi(cluster), SimProcess(["--preset", "test"]) as sim:
            res = run_bench(sim.url, PLAN, BenchOptions(progress=False, telemetry=sampler))
    finally:
        for h in hosts:
            h.close()
    t = res.summary.telemetry
    for a in cluster.addresses:
        assert t["nodes"][a]["gpu"] == "not available: nvidia-smi: command not found"
        assert t["nodes"][a]["memory_samples"] >= 2
        assert set(t["decode"]["nodes"][a]) == {"memory_samples", "mem_available_min_bytes", "flags"}
    assert "joules_per_token" not in t["decode"] and "energy_j" not in t["decode"]
    assert not any(k.startswith(("energy_per_token", "sm_clock")) for k in res.summary.measures)
    assert res.summary.flags == []
    _no_sampler_left(cluster, sampler)


def test_a_run_that_fails_halfway_stops_every_sampler_and_keeps_the_samples(gpus, monkeypatch):
    cluster = gpus
    hosts = ssh_hosts(cluster)
    sampler = NodeTelemetry(hosts, period_s=PERIOD)
    kept = []

    async def broken_prefill(session, rep):
        raise RuntimeError("the prefill phase broke")

    monkeypatch.setitem(WORKLOADS, "prefill", dataclasses.replace(WORKLOADS["prefill"], run=broken_prefill))
    try:
        with (
            SimProcess(["--preset", "test"]) as sim,
            pytest.raises(RuntimeError, match="prefill phase broke"),
        ):
            run_bench(
                sim.url,
                PLAN,
                BenchOptions(progress=False, telemetry=sampler, on_partial=kept.append),
            )
    finally:
        for h in hosts:
            h.close()
    (partial,) = kept
    assert partial.provenance["partial"] is True
    assert any(r["source"] == "nvidia-smi" for r in _csv(partial.telemetry[HEALTHY]))
    assert partial.summary.telemetry["decode"]["nodes"][HEALTHY]["energy_j"] > 0
    _no_sampler_left(cluster, sampler)


def test_a_sampler_never_stopped_ends_by_itself_after_its_lifetime(gpus):
    cluster = gpus
    hosts = ssh_hosts(cluster)
    sampler = NodeTelemetry(hosts[:1], period_s=PERIOD)
    try:
        # labkit "crashed": nobody calls stop(). That the sampler ran is shown by its memory samples below, not
        # by catching its process alive (on a loaded machine the SSH start can take the whole second) nor by
        # nvidia-smi rows (the shim's Python start can outlast a 1 s `timeout` there; CI saw both)
        sampler.start(max_seconds=1)
        sampler.threads[HEALTHY].join(30)
        assert not sampler.threads[HEALTHY].is_alive()
        _no_sampler_left(cluster, sampler)
        assert sampler.series(0)[HEALTHY].memory  # it did sample until then
    finally:
        sampler.stop()
        for h in hosts:
            h.close()


CRASHING = """
import sys, time
from labkit.measure import NodeTelemetry
from labkit.nodes.ssh import SshHost
addr, port, user, key, known = sys.argv[1:]
host = SshHost(addr, user=user, port=int(port), key_files=(key,), known_hosts=known, use_agent=False)
sampler = NodeTelemetry([host], period_s=0.2)
sampler.start(max_seconds=600)
print(sampler.bases[addr], flush=True)
time.sleep(600)
"""


def test_a_labkit_that_dies_takes_its_samplers_with_it(gpus):
    cluster = gpus
    opts = cluster.ssh_options()
    args = [HEALTHY, str(cluster.port), opts.user, opts.key_files[0], opts.known_hosts]
    child = subprocess.Popen([sys.executable, "-c", CRASHING, *args], stdout=subprocess.PIPE, text=True)
    try:
        base = child.stdout.readline().strip()
        assert sampler_processes(cluster) != [] and glob.glob(base + ".*") == [base + ".pid"]
    finally:
        child.kill()  # no finally, no stop file: the node sees its pipe close
        child.wait()
    deadline = time.monotonic() + 15
    while sampler_processes(cluster) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sampler_processes(cluster) == []
    assert glob.glob(base + ".*") == []  # it cleaned up after itself


def _path_without_nvidia_smi() -> str:
    return ":".join(
        d for d in os.environ["PATH"].split(":") if d and not os.path.exists(os.path.join(d, "nvidia-smi"))
    )


def _no_local_sampler_left(local_env, sampler: NodeTelemetry) -> None:
    deadline = time.monotonic() + 10
    while [p for p in local_env.processes() if "labkit-telemetry-" in p[1]] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in local_env.processes() if "labkit-telemetry-" in p[1]] == []
    assert [p for p in glob.glob(sampler.bases["localhost"] + ".*")] == []


def test_stop_wakes_the_sampler_for_its_last_sample_instead_of_waiting_out_its_period(local_env, monkeypatch):
    # With a 30 s period, a stop that waited for the next sample and then for the script's sleep to end (as it
    # did) took 30 to 60 s. USR1 ends the script's wait for one more sample now, TERM ends the script.
    monkeypatch.setenv("PATH", _path_without_nvidia_smi())
    sampler = NodeTelemetry([LocalHost()], period_s=30)
    sampler.start(max_seconds=600)
    asked = time.monotonic()
    sampler.stop()
    took = time.monotonic() - asked
    first, last = sampler.series(0)["localhost"].memory
    assert took < 15 and not sampler.threads["localhost"].is_alive()
    assert last.t - first.t < 15e9  # the last sample came on the wake, not after a full period
    _no_local_sampler_left(local_env, sampler)


def test_this_machine_without_nvidia_smi_records_not_available_once_and_samples_memory(
    local_env, monkeypatch
):
    monkeypatch.setenv("PATH", _path_without_nvidia_smi())
    sampler = NodeTelemetry([LocalHost()], period_s=PERIOD)
    with SimProcess(["--preset", "test"]) as sim:
        res = run_bench(sim.url, PLAN, BenchOptions(progress=False, telemetry=sampler))
    t = res.summary.telemetry
    assert t["nodes"]["localhost"]["gpu"] == "not available: nvidia-smi: command not found"
    assert (
        t["nodes"]["localhost"]["memory"] == "/proc/meminfo"
        and t["nodes"]["localhost"]["memory_samples"] >= 2
    )
    mem = _csv(res.telemetry["localhost"])
    assert mem and {r["source"] for r in mem} == {"meminfo"}
    assert {int(r["mem_total_kb"]) for r in mem} == {_mem_total_kb()}
    node = t["decode"]["nodes"]["localhost"]
    assert node["mem_available_min_bytes"] == 1024 * min(
        int(r["mem_available_kb"]) for r in mem if _inside(int(r["t_ns"]), res, "decode")
    )
    assert not any(k.startswith("energy_per_token") for k in res.summary.measures)
    _no_local_sampler_left(local_env, sampler)


def _inside(t: int, res, window: str) -> bool:
    """Whether a sample's stamp lies in the decode window (first to last decode request)."""
    dec = [r for r in res.records if r.phase == "decode" and r.ok]
    return min(r.t_send for r in dec) <= t <= max(r.t_end for r in dec)


def test_the_shim_loops_in_the_real_tools_format_until_killed():
    shim = os.path.join(os.path.dirname(__file__), "..", "support", "nvidia_smi_shim.py")
    fields = "--query-gpu=timestamp,index,power.draw,clocks.sm,clocks.mem,clocks_throttle_reasons.active"
    for loop in (["-lms", "50"], ["-lms=50"], ["--loop-ms=50"], ["-l", "1"]):
        env = {"PATH": "/usr/bin:/bin", "LABKIT_TEST_NODE": "nowhere"}
        p = subprocess.Popen(
            [sys.executable, shim, fields, "--format=csv,noheader,nounits", *loop],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            rows = [p.stdout.readline().strip() for _ in range(2)]
        finally:
            p.kill()
            p.wait()
        for row in rows:
            stamp, rest = row.split(", ", 1)
            assert time.strptime(stamp[:19], "%Y/%m/%d %H:%M:%S") and stamp[19] == "." and len(stamp) == 23
            assert rest == "0, 11.20, 2405, [N/A], 0x0000000000000001"  # GB10 idle, old field name answered
