# A stand-in for `nvidia-smi` on the fake nodes (tests/support/nodes.py installs it on their PATH), answering the
# CSV queries labkit asks in the real tool's format. Each node has one GPU as on a DGX Spark (an "NVIDIA GB10"
# whose unified memory has no memory.total and whose memory clock reads "[N/A]") and no compute process. A test
# changes that by writing $LABKIT_SHIM_STATE/<node>/nvidia-smi.json (tests/support/telemetry_nodes.py does):
#   "apps":   [{"pid": 4242, "process_name": "python3", "used_memory": "81920 MiB"}]  compute processes
#   "gpus":   [{...}]            the GPU rows (keys: the query field names), replacing the GB10 below
#   "series": [{...}, ...]       per loop iteration i, series[i % len] overrides fields of every GPU row
#                                (a time series; one entry = constant values), e.g. {"clocks.sm": "600 MHz"}
#   "fail":   "NVIDIA-SMI has failed because ..."   printed instead of any answer, exit 9 (driver unreachable)
#   "reject": ["clocks_event_reasons"]   field prefixes this driver does not know (an older driver), exit 2
#   "cuda":   "13.0"             the CUDA version the summary's header names
#   nvidia-smi          (no arguments) the summary, of which the header is printed: date, then
#       | NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
#   nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
#       4242, python3, 81920 MiB
#   nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
#       0, NVIDIA GB10, 580.95.05, [N/A]
#   nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm --format=csv,noheader,nounits -lms 200
#       2026/12/01 14:30:00.123, 11.20, 2405        (a row per GPU every 200 ms until killed)
# Loop mode: `-lms N`, `-lms=N`, `--loop-ms=N` (milliseconds), `-l N`, `-l=N`, `--loop=N` (seconds).
import datetime
import json
import os
import sys
import time
from pathlib import Path

GPU = {
    "index": "0",
    "name": "NVIDIA GB10",
    "driver_version": "580.95.05",
    "uuid": "GPU-5c1a7e52-9d0b-4f4e-a1d2-000000000000",
    "memory.total": "[N/A]",
    "memory.used": "[N/A]",
    "memory.free": "[N/A]",
    "utilization.gpu": "0 %",
    "temperature.gpu": "41",
    "power.draw": "11.20 W",
    "clocks.sm": "2405 MHz",
    "clocks.mem": "[N/A]",
    "clocks_event_reasons.active": "0x0000000000000001",  # GPU idle
}
# What the header row calls a field (with its unit), as `--format=csv` prints it.
HEADERS = {
    "used_memory": "used_gpu_memory [MiB]",
    "memory.total": "memory.total [MiB]",
    "utilization.gpu": "utilization.gpu [%]",
    "power.draw": "power.draw [W]",
    "clocks.sm": "clocks.current.sm [MHz]",
    "clocks.mem": "clocks.current.memory [MHz]",
}
UNITS = (" MiB", " %", " W", " MHz")
OLD = "clocks_throttle_reasons."  # the older spelling of clocks_event_reasons.*, still accepted


def state() -> dict:
    node = os.environ.get("LABKIT_TEST_NODE", "local")
    f = Path(os.environ.get("LABKIT_SHIM_STATE", "/nonexistent")) / node / "nvidia-smi.json"
    data = json.loads(f.read_text()) if f.exists() else {}
    data.setdefault("apps", [])
    data.setdefault("gpus", [GPU])
    return data


def loop_seconds(args: list[str]) -> float | None:
    """The loop period asked for, in seconds; None for a single answer."""
    for i, a in enumerate(args):
        for flag, scale in (("-lms", 1e-3), ("--loop-ms", 1e-3), ("-l", 1.0), ("--loop", 1.0)):
            if a == flag and i + 1 < len(args):
                return float(args[i + 1]) * scale
            if a.startswith(flag + "="):
                return float(a.split("=", 1)[1]) * scale
    return None


def value(row: dict, name: str, nounits: bool) -> str:
    if name == "timestamp":
        return datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    v = str(row.get(name, row.get("clocks_event_reasons." + name.removeprefix(OLD), "[N/A]")))
    if nounits:
        for unit in UNITS:
            v = v.removesuffix(unit)
    return v


def answer(rows: list[dict], fields: list[str], opts: list[str], overrides: dict) -> None:
    for row in rows:
        full = {**row, **overrides}
        print(", ".join(value(full, f, "nounits" in opts) for f in fields))
    sys.stdout.flush()


def main(args: list[str]) -> int:
    s = state()
    if s.get("fail"):
        print(s["fail"])
        return 9
    if not args:  # the summary table: its header is what labkit reads (the driver and CUDA versions)
        driver, cuda = s["gpus"][0].get("driver_version", "580.95.05"), s.get("cuda", "13.0")
        rule = "+" + "-" * 89 + "+"
        print(datetime.datetime.now().strftime("%a %b %d %H:%M:%S %Y       "))
        print(rule)
        print(f"| NVIDIA-SMI {driver:<22} Driver Version: {driver:<14} CUDA Version: {cuda:<9}|")
        print("+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+")
        return 0
    query = next((a.split("=", 1) for a in args if a.startswith("--query-")), None)
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
    if query is None or not fmt.startswith("csv"):
        print(f"shim nvidia-smi: unsupported: nvidia-smi {' '.join(args)}", file=sys.stderr)
        return 2
    kind, fields = query[0], query[1].split(",")
    if kind not in ("--query-compute-apps", "--query-gpu"):
        print('Invalid combination of input arguments. Please run "nvidia-smi -h" for help.', file=sys.stderr)
        return 2
    for f in fields:
        if any(f.startswith(prefix) for prefix in s.get("reject", [])):
            print(f'Field "{f}" is not a valid field to query.')
            return 2
    rows = s["apps" if kind == "--query-compute-apps" else "gpus"]
    opts = fmt.split(",")[1:]
    if "noheader" not in opts:
        print(", ".join(HEADERS.get(f, f) for f in fields))
    series = s.get("series") or [{}]
    period = loop_seconds(args)
    i = 0
    try:
        while True:
            answer(rows, fields, opts, series[i % len(series)] if kind == "--query-gpu" else {})
            if period is None:
                return 0
            i += 1
            time.sleep(period)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
