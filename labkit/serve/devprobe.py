"""The device probe: memory bandwidth and matmul throughput measured where the engine runs, before it starts
(docs/roofline.md, "Bandwidth"). In the lane's image on its GPUs with the torch the image has (a docker lane),
or with the engine's own interpreter on the node (a process lane); on a CPU lane the same on the CPU, with
torch or else numpy. Bounded: at most PROBE_BYTES of memory (an eighth of what is free, if less) and a few
seconds. Pure: the script, the command that runs it, and the parser of its one line of answer.
"""

from __future__ import annotations

import json

from labkit.nodes import Result
from labkit.recipe import LanePlan
from labkit.serve.enginehelp import in_image
from labkit.serve.verdict import OK, WARN, Check

PROBE_CHECK = "device probe"
MARK = "LABKIT_PROBE "
PROBE_BYTES = {"gpu": 2 * 2**30, "cpu": 512 * 2**20}  # the read buffer: far above any cache
MATMUL = {"gpu": 8192, "cpu": 1024}  # square matmul side
ROUNDS = 5  # reads of the buffer per timing; the best of three timings is kept

# The script: standard library, plus torch or numpy when the interpreter has them. One line of JSON out.
SCRIPT = r"""
import json, os, sys, time
req = json.loads(sys.argv[1])
out = {"tool": None}
out_note = None
def best(fn, n):
    times = []
    for _ in range(3):
        t = time.perf_counter(); fn(n); times.append(time.perf_counter() - t)
    return min(times)
def free_bytes():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None
try:
    import torch
    gpu = torch.cuda.is_available()
    dev = "cuda" if gpu else "cpu"
    kind = "gpu" if gpu else "cpu"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    free = torch.cuda.mem_get_info()[0] if gpu else free_bytes()
    size = min(req["bytes"][kind], (free or 1 << 40) // 8) // 4 * 4
    x = torch.ones(size // 4, dtype=torch.float32, device=dev)
    x.sum(); sync()
    def reads(n):
        for _ in range(n):
            x.sum()
        sync()
    t = best(reads, req["rounds"])
    side = req["matmul"][kind]
    dtype = torch.bfloat16 if gpu else torch.float32
    a = torch.ones(side, side, dtype=dtype, device=dev)
    mul = lambda: a @ a
    if gpu and req.get("fp8"):  # the prefill kernels' dtype, when the checkpoint's weights are FP8
        try:
            a8 = a.to(torch.float8_e4m3fn)
            one = torch.ones((), device=dev)
            torch._scaled_mm(a8, a8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            mul, dtype = (lambda: torch._scaled_mm(a8, a8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), "float8_e4m3fn"
        except Exception as e:
            out_note = "fp8 matmul not available here (%s): bfloat16 instead" % str(e)[:120]
    mul(); sync()
    def mm(n):
        for _ in range(n):
            mul()
        sync()
    m = best(mm, 2)
    name = torch.cuda.get_device_name(0) if gpu else "cpu"
    out = {"tool": "torch " + torch.__version__.split("+")[0], "device": name, "kind": kind}
except ImportError:
    try:
        import numpy as np
        kind, name = "cpu", "cpu"
        size = min(req["bytes"]["cpu"], (free_bytes() or 1 << 40) // 8) // 4 * 4
        x = np.ones(size // 4, dtype=np.float32)
        x.sum()
        t = best(lambda n: [x.sum() for _ in range(n)], req["rounds"])
        side, dtype = req["matmul"]["cpu"], "float32"
        a = np.ones((side, side), dtype=np.float32)
        a @ a
        m = best(lambda n: [a @ a for _ in range(n)], 2)
        out = {"tool": "numpy " + np.__version__, "device": name, "kind": kind}
    except ImportError:
        print("LABKIT_PROBE " + json.dumps({"tool": None, "why": "neither torch nor numpy in " + sys.executable}))
        sys.exit(0)
out.update({
    "read_bytes_per_s": size * req["rounds"] / t,
    "read_bytes": size,
    "rounds": req["rounds"],
    "matmul_flops_per_s": 2 * side ** 3 * 2 / m,
    "matmul_side": side,
    "matmul_dtype": str(dtype).replace("torch.", ""),
    "python": sys.executable,
})
if out_note:
    out["note"] = out_note
print("LABKIT_PROBE " + json.dumps(out))
"""


def probe_argv(python: str, fp8: bool = False) -> list[str]:
    """The interpreter running the script with its bounds; `fp8`: time the matmul in FP8 on a GPU (the
    checkpoint's weights are FP8, so its prefill kernels are)."""
    req = {"bytes": PROBE_BYTES, "matmul": MATMUL, "rounds": ROUNDS, "fp8": fp8}
    return [python, "-c", SCRIPT, json.dumps(req)]


def probe_command(plan: LanePlan, python: str, fp8: bool = False) -> str:
    """The probe as the lane runs code: in its image with its GPUs (docker), else on the node."""
    return in_image(plan, probe_argv(python, fp8), gpus=True)


def parse_probe(node: str, r: Result, date: str) -> Check:
    """The probe's answer as a check that never refuses: OK with the figures as facts, WARN when it could not
    measure (the roofline then uses the nominal figure, and says so)."""
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith(MARK)), None)
    if line is None:
        why = (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1][:200]
        return Check(node, PROBE_CHECK, WARN, f"not measured: {why}", facts={"date": date})
    facts = json.loads(line[len(MARK) :])
    facts["date"] = date
    if not facts.get("tool"):
        return Check(node, PROBE_CHECK, WARN, f"not measured: {facts.get('why')}", facts=facts)
    text = (
        f"{facts['device']}: read {facts['read_bytes_per_s'] / 1e9:,.1f} GB/s, matmul "
        f"{facts['matmul_flops_per_s'] / 1e12:,.2f} TFLOP/s {facts['matmul_dtype']} ({facts['tool']})"
    )
    return Check(node, PROBE_CHECK, OK, text, facts=facts)
