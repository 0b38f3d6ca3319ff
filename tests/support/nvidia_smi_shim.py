# A stand-in for `nvidia-smi` on the fake nodes (tests/support/nodes.py installs it on their PATH), answering the
# CSV queries labkit asks in the real tool's format. Each node has one GPU as on a DGX Spark (an "NVIDIA GB10"
# whose unified memory has no memory.total: "[N/A]") and no compute process. A test changes that by writing
# $LABKIT_SHIM_STATE/<node>/nvidia-smi.json: {"apps": [{"pid": 4242, "process_name": "python3",
# "used_memory": "81920 MiB"}], "gpus": [{...}]} (keys: the query field names).
#   nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader
#       4242, python3, 81920 MiB
#   nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
#       0, NVIDIA GB10, 580.95.05, [N/A]
import json
import os
import sys
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
}
# What the header row calls a field (with its unit), as `--format=csv` prints it.
HEADERS = {
    "used_memory": "used_gpu_memory [MiB]",
    "memory.total": "memory.total [MiB]",
    "utilization.gpu": "utilization.gpu [%]",
}


def state() -> dict:
    node = os.environ.get("LABKIT_TEST_NODE", "local")
    f = Path(os.environ.get("LABKIT_SHIM_STATE", "/nonexistent")) / node / "nvidia-smi.json"
    data = json.loads(f.read_text()) if f.exists() else {}
    return {"apps": data.get("apps", []), "gpus": data.get("gpus", [GPU])}


def main(args: list[str]) -> int:
    query = next((a.split("=", 1) for a in args if a.startswith("--query-")), None)
    fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
    if query is None or not fmt.startswith("csv"):
        print(f"shim nvidia-smi: unsupported: nvidia-smi {' '.join(args)}", file=sys.stderr)
        return 2
    kind, fields = query[0], query[1].split(",")
    if kind not in ("--query-compute-apps", "--query-gpu"):
        print('Invalid combination of input arguments. Please run "nvidia-smi -h" for help.', file=sys.stderr)
        return 2
    rows = state()["apps" if kind == "--query-compute-apps" else "gpus"]
    opts = fmt.split(",")[1:]
    if "noheader" not in opts:
        print(", ".join(HEADERS.get(f, f) for f in fields))
    for row in rows:
        values = [str(row.get(f, "[N/A]")) for f in fields]
        if "nounits" in opts:
            values = [v.removesuffix(" MiB").removesuffix(" %") for v in values]
        print(", ".join(values))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
