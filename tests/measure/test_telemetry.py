"""Node telemetry, the pure part (docs/measurement.md, "Node telemetry"): nvidia-smi's loop-mode rows and the
sampler's own lines as a node's series, energy by the trapezoid rule, windows from records, joules per token,
clock medians, the clock-reasons bitmask, the low-clock and throttled flags, and the healthy clocks a baseline
is updated from. The sampler script itself runs here on this machine's /bin/sh."""

from __future__ import annotations

import subprocess

import pytest

from labkit.measure import BenchResult, RequestRecord, RunSummary, healthy_clocks
from labkit.measure.summary.compose import summarize
from labkit.measure.telemetry.energy import Window, integrate, window_summary
from labkit.measure.telemetry.sampling import sampler_script, signal_command
from labkit.measure.telemetry.series import (
    TelemetryRun,
    node_csv,
    number,
    parse_gpu_row,
    parse_node,
    reason_names,
)
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan

S = 1_000_000_000
# rows as `nvidia-smi --query-gpu=timestamp,index,power.draw,clocks.sm,clocks.mem,temperature.gpu,
# utilization.gpu,clocks_event_reasons.active --format=csv,noheader,nounits -lms 1000` prints them on a GB10
ROW = "2026/12/01 14:30:00.123, 0, 35.12, 2405, [N/A], 52, 87, 0x0000000000000000"
PLAN = MeasurePlan("chat", 1, DecodePlan((1,), 2, 10, 0), PrefillPlan((4096,), 1), 10.0)


def _row(t_s: float, power: float, sm: int, reasons: int = 0, temp: int = 50) -> tuple[int, str]:
    return int(
        t_s * S
    ), f"2026/12/01 14:30:{t_s:06.3f}, 0, {power:.2f}, {sm}, [N/A], {temp}, 80, 0x{reasons:016x}"


def _mem(t_s: float, available_kb: int) -> tuple[int, str]:
    return int(t_s * S), f"M 2026/12/01 14:30:{t_s:06.3f} 131267412 {available_kb} 70000000"


def _rec(phase: str, t0: float, t1: float, *, out: int = 10, target: int = 0, prompt: int = 0, rep: int = 0):
    return RequestRecord(
        phase=phase,
        t_send=int(t0 * S),
        t_end=int(t1 * S),
        output_tokens=out,
        prompt_target=target,
        prompt_tokens=prompt or None,
        rep=rep,
    )


def test_real_format_rows_with_values_the_gb10_cannot_give():
    g = parse_gpu_row(ROW, 7)
    assert (g.t, g.node_time, g.gpu, g.power_w, g.sm_mhz, g.mem_mhz) == (
        7,
        "2026/12/01 14:30:00.123",
        0,
        35.12,
        2405,
        None,
    )
    assert (g.temp_c, g.util_pct, g.reasons) == (52, 87, 0)
    odd = parse_gpu_row("2026/12/01 14:30:00.123, 0, [Not Supported], 2405, [N/A], [N/A], [N/A], [N/A]", 0)
    assert (odd.power_w, odd.temp_c, odd.util_pct, odd.reasons) == (None, None, None, None)
    assert number("35.12 W") == 35.12 and number("0x0000000000000024") == 0x24 and number("N/A") is None
    assert (
        parse_gpu_row("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 0)
        is None
    )
    assert parse_gpu_row("0, 35.12, 2405", 0) is None


def test_a_node_series_from_the_sampler_lines():
    s = parse_node("dgx5", [(1, "F clocks_event_reasons.active"), _row(0.5, 30, 2400), _mem(0.6, 98765432)])
    assert s.gpu_status == "nvidia-smi" and s.memory_status == "/proc/meminfo"
    assert s.memory[0].available_kb == 98765432 and s.memory[0].node_time == "2026/12/01 14:30:00.600"
    assert s.status()["reasons_field"] == "clocks_event_reasons.active" and s.status()["gpus"] == [0]
    old_kernel = parse_node(
        "dgx5", [(1, "M 2026/12/01 14:30:00.600 131267412 - 70000000")]
    )  # no MemAvailable
    assert old_kernel.memory[0].available_kb is None and old_kernel.memory[0].cached_kb == 70000000
    assert old_kernel.memory_status == "not available: /proc/meminfo has no MemAvailable"
    missing = parse_node("dgx6", [(1, "N nvidia-smi: command not found"), _mem(0.6, 1)])
    assert missing.gpu_status == "not available: nvidia-smi: command not found" and missing.gpu == []
    failed = parse_node("dgx7", [(1, "NVIDIA-SMI has failed because of X."), (2, "X 9"), _mem(0.6, 1)])
    assert failed.gpu_status == "not available: NVIDIA-SMI has failed because of X."
    silent = parse_node("dgx8", [(2, "X 127")])
    assert silent.gpu_status == "not available: nvidia-smi exited with status 127"
    assert silent.memory_status == "not available: no sample received"
    gone = parse_node("dgx8", [], "cannot connect to root@dgx8:22: timed out")
    assert gone.gpu_status == gone.memory_status == "not available: cannot connect to root@dgx8:22: timed out"
    stopped = parse_node("dgx5", [_row(0.5, 30, 2400), (2, "X 9")])
    assert stopped.gpu_status == "nvidia-smi" and "stopped after 1 samples (status 9)" in stopped.gpu_error


def test_the_clock_reasons_bitmask_as_nvml_documents_it():
    assert reason_names(0) == [] and reason_names(None) == []
    assert reason_names(0x1) == ["gpu_idle"]
    assert reason_names(0x4 | 0x8) == ["sw_power_cap", "hw_slowdown"]
    assert reason_names(0x20 | 0x40 | 0x80) == [
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
    ]
    assert reason_names(0x10000 | 0x2) == ["applications_clocks_setting", "0x10000"]


def test_energy_by_the_trapezoid_rule_with_the_edges_interpolated():
    pts = [(0, 10.0), (1 * S, 20.0), (2 * S, 20.0)]
    # 0.5 s..1 s: from 15 W to 20 W = 8.75 J; 1 s..2 s at 20 W = 20 J
    assert integrate(pts, S // 2, 2 * S) == (pytest.approx(28.75), 1.5 * S)
    assert integrate(pts, 0, 2 * S)[0] == pytest.approx(35.0)
    j, covered = integrate(pts, int(1.5 * S), 3 * S)  # past the last sample: only what is covered counts
    assert j == pytest.approx(10.0) and covered == S // 2
    assert integrate(pts, int(0.2 * S), int(0.4 * S))[0] == pytest.approx(0.2 * 13.0)  # between two samples
    assert integrate([], 0, S) == (0.0, 0)


def test_a_window_over_two_nodes_gives_joules_per_token_clock_medians_and_memory():
    a = parse_node(
        "a", [_row(t, 10, sm, temp=40 + t) for t, sm in ((0, 2400), (1, 2300), (2, 2500))] + [_mem(1, 500)]
    )
    b = parse_node("b", [_row(t, 30, 1000) for t in (0, 1, 2)] + [_mem(0.5, 900), _mem(1.5, 700)])
    w = Window("decode", ((0, 2 * S),), 80, "output")
    win = window_summary({"a": a, "b": b}, w)
    assert win["seconds"] == 2 and win["energy_j"] == pytest.approx(20 + 60)
    assert win["joules_per_token"] == pytest.approx(80 / 80)
    na = win["nodes"]["a"]
    assert (na["sm_clock_median_mhz"], na["sm_clock_min_mhz"], na["temperature_max_c"]) == (2400, 2300, 42)
    assert na["power_mean_w"] == pytest.approx(10) and na["samples"] == 3 and na["utilization_mean_pct"] == 80
    assert (
        win["nodes"]["b"]["mem_available_min_bytes"] == 700 * 1024
        and win["nodes"]["b"]["memory_samples"] == 2
    )
    # a window the samples do not cover gets no energy per token, and says why
    late = window_summary({"a": a}, Window("prefill_4096", ((int(1.5 * S), 3 * S),), 4096, "prompt"))
    assert "joules_per_token" not in late and "do not cover" in late["note"]


def test_a_window_shorter_than_the_period_takes_the_samples_around_it():
    a = parse_node("a", [_row(0, 20, 2400), _row(1, 40, 2000, reasons=0x4)])
    win = window_summary({"a": a}, Window("prefill_4096", ((int(0.4 * S), int(0.6 * S)),), 100, "prompt"))
    n = win["nodes"]["a"]
    assert n["samples"] == 2 and n["neighbour_samples"] == 2 and n["sm_clock_median_mhz"] == 2200
    assert win["energy_j"] == pytest.approx(0.2 * 30) and win["joules_per_token"] == pytest.approx(0.06)
    assert n["clock_reasons"] == ["sw_power_cap"] and n["limited_samples"] == 1


def _summary(series, records, baseline=None, drop=0.10) -> RunSummary:
    run = TelemetryRun({s.node: s for s in series}, 1000, baseline, drop)
    return summarize(records, [], PLAN, telemetry=run)


def test_the_summary_gets_windows_measures_and_the_health_flags():
    def rows(sm: int, reasons: int = 0) -> list[tuple[int, str]]:
        return [_row(t, 50, sm, reasons) for t in range(0, 11)]

    healthy = parse_node("dgx5", rows(2400) + [_mem(1, 100)])
    low = parse_node("dgx7", rows(600))
    hot = parse_node("dgx6", rows(2350, reasons=0x20))
    none = parse_node("dgx8", [(0, "N nvidia-smi: command not found"), _mem(1, 100)])
    # two repetitions: the decode window is each one's first-to-last decode request, not the prefill between
    records = [
        _rec("decode", 1, 2),
        _rec("warmup", 2, 2.5),
        _rec("decode", 2.5, 3),
        _rec("prefill", 4, 5, out=1, target=4096, prompt=4096),
        _rec("decode", 6, 7, rep=1),
    ]
    base = {"dgx5": 2400, "dgx6": 2400, "dgx7": 2400}
    s = _summary([healthy, low, hot, none], records, base)
    d = s.telemetry["decode"]
    assert d["seconds"] == 3 and d["tokens"] == 40  # the warmup inside the window counts, the prefill not
    assert d["joules_per_token"] == pytest.approx(3 * 50 * 3 / 40)
    assert s.measures["energy_per_token_decode"] == d["joules_per_token"]
    assert s.measures["energy_per_token_prefill_4096"] == pytest.approx(3 * 50 / 4096)
    assert s.measures["sm_clock_decode_median"] == 600 and "(dgx7)" in s.method["sm_clock_decode_median"]
    assert "dgx8" not in s.method["energy_per_token_decode"]
    assert s.telemetry["nodes"]["dgx8"]["gpu"] == "not available: nvidia-smi: command not found"
    assert "energy_j" not in d["nodes"]["dgx8"] and "sm_clock_median_mhz" not in d["nodes"]["dgx8"]
    codes = [(f["code"], f["window"], f["message"].split(":")[0]) for f in s.flags]
    assert codes == [
        ("throttled", "decode", "dgx6"),
        ("low-clock", "decode", "dgx7"),
        ("throttled", "prefill_4096", "dgx6"),
        ("low-clock", "prefill_4096", "dgx7"),
    ]
    low_msg = next(f["message"] for f in s.flags if f["code"] == "low-clock")
    assert (
        low_msg.startswith("dgx7: SM clock median 600 MHz over ")
        and "75% below its healthy 2400 MHz" in low_msg
    )
    assert "more than the 10% allowed" in low_msg
    hot_msg = next(f["message"] for f in s.flags if f["code"] == "throttled")
    assert "sw_thermal_slowdown" in hot_msg and "(SM clock median 2350 MHz)" in hot_msg
    assert d["nodes"]["dgx7"]["flags"] == ["low-clock"] and d["nodes"]["dgx5"]["flags"] == []
    # healthy clocks: only windows without a flag on that node; a baseline-less run marks no low clock
    assert healthy_clocks(s.telemetry) == {"dgx5": 2400}
    assert [f["code"] for f in _summary([low], records).flags] == []
    assert [f["code"] for f in _summary([hot], records, {"dgx6": 2500}, drop=0.1).flags] == ["throttled"] * 2
    assert "low-clock" in [f["code"] for f in _summary([hot], records, {"dgx6": 2650}).flags]
    # the summary round-trips through run.json's shape
    assert RunSummary.from_dict(s.to_dict()) == s


def test_no_telemetry_leaves_the_summary_as_it_was():
    s = summarize([_rec("decode", 1, 2)], [], PLAN)
    assert s.telemetry == {} and not any(k.startswith(("energy", "sm_clock")) for k in s.measures)


def test_the_raw_samples_as_csv_and_through_the_result_file(tmp_path):
    s = parse_node("dgx5", [_row(0.5, 30, 2400), _mem(0.25, 900)])
    text = node_csv(s)
    lines = text.splitlines()
    assert lines[0].startswith("t_ns,source,node_time,gpu,power_w,sm_clock_mhz,mem_clock_mhz,")
    assert lines[1] == "250000000,meminfo,2026/12/01 14:30:00.250,,,,,,,,131267412,900,70000000"
    assert (
        lines[2]
        == "500000000,nvidia-smi,2026/12/01 14:30:00.500,0,30.00,2400,[N/A],50,80,0x0000000000000000,,,"
    )
    res = BenchResult([], [], RunSummary(), {}, telemetry={"dgx5": text})
    assert BenchResult.load(res.save(tmp_path / "bench.json")).telemetry == {"dgx5": text}


def test_the_sampler_script_runs_on_sh_quotes_its_paths_and_cleans_up(tmp_path):
    base = str(tmp_path / "it's here")
    script = sampler_script(period_ms=50, max_seconds=30, base=base)
    proc = subprocess.Popen(
        ["/bin/sh", "-c", script], stdout=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    lines = [proc.stdout.readline() for _ in range(3)]
    assert (tmp_path / "it's here.pid").read_text().strip() == str(proc.pid)
    (tmp_path / "it's here.stop").touch()
    assert proc.wait(10) == 0
    series = parse_node("local", [(i, line.rstrip("\n")) for i, line in enumerate(lines)])
    assert series.gpu_status == "not available: nvidia-smi: command not found"
    assert series.memory and series.memory[0].total_kb and series.memory[0].available_kb
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # stop and pid file removed


def test_the_stop_commands_quote_the_state_paths():
    base = "/tmp/labkit telemetry-x-0"
    assert (
        signal_command(base, "USR1")
        == "kill -USR1 $(cat '/tmp/labkit telemetry-x-0.pid' 2>/dev/null) 2>/dev/null; true"
    )
    end = signal_command(base, "TERM", stop=True)
    assert end.startswith("touch '/tmp/labkit telemetry-x-0.stop'; kill -TERM $(cat '")
    assert signal_command(base, "TERM", forget=True).endswith("; rm -f '/tmp/labkit telemetry-x-0.pid'")


def test_the_sampler_script_ends_by_itself_after_its_lifetime(tmp_path):
    # The end is a whole second of the node's clock, so a lifetime of 1 s can leave a few ms (one sample when
    # the script starts at x.95 s); 2 s always leaves at least one full second.
    script = sampler_script(period_ms=50, max_seconds=2, base=str(tmp_path / "s"))
    r = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, timeout=20)
    assert r.returncode == 0 and r.stdout.count("\nM ") >= 1
    assert list(tmp_path.iterdir()) == []
