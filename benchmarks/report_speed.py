"""How long `labkit report` takes over 1,000 stored runs (target: <= 5 s on a 2-core machine).

Writes 1,000 synthetic runs (10 lanes x 100 runs, each with run.json and a 20-row requests.csv) into a
temp folder through the real store, then times `labkit report` (tables + plots) and `labkit report --check`
as subprocesses (each repeated, median and min–max), next to a baseline measured in the same run: `labkit --version` (interpreter start and
labkit import). Prints figures; asserts nothing.

    python benchmarks/report_speed.py [--runs 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from labkit.measure import RequestRecord, RunSummary  # noqa: E402
from labkit.store import ResultsStore  # noqa: E402


def synth(root: Path, runs: int, lanes: int = 10) -> None:
    rng = random.Random(7)
    store = ResultsStore(root)
    for i in range(runs):
        lane = i % lanes
        plan = {
            "recipe": f"synthetic-{lane // 2}",
            "variant_id": f"spec-{'dspark' if lane % 2 else 'none'}",
            "label": f"synthetic lane {lane}",
            "simulated": True,
        }
        c1 = 30 + 3 * lane + rng.uniform(-1, 1)
        with store.new_run(plan, run_id=f"20261130T{i // 60:02d}{i % 60:02d}00Z-{i:06x}") as run:
            records = []
            for turn in range(20):
                t_send = turn * 10**9
                records.append(
                    RequestRecord(
                        run_id=run.run_id,
                        phase="decode",
                        turn=turn,
                        output_tokens=64,
                        n_first=1,
                        t_send=t_send,
                        t_first=t_send + 2 * 10**8,
                        t_last=t_send + 2 * 10**8 + int(63 / c1 * 1e9),
                        decode_tps=c1,
                    )
                )
            run.write_requests(records)
            run.finish(
                RunSummary(
                    measures={
                        "decode_c1": c1,
                        "decode_c1_cold": c1 * 0.7,
                        "decode_c2_agg": c1 * 1.5,
                        "prefill_4096": 700 + rng.uniform(-50, 50),
                        "prefill_12600": 650 + rng.uniform(-50, 50),
                        "kv_pool_tokens": 8_000_000,
                        "kv_pool_context": 131072,
                    },
                    n_ok=20,
                )
            )


def timed(args: list[str], env: dict) -> tuple[float, int]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "labkit", *args], env=env, capture_output=True, text=True)
    return time.perf_counter() - start, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="labkit-report-speed-"))
    try:
        t0 = time.perf_counter()
        synth(tmp, args.runs)
        print(
            f"wrote {args.runs} synthetic runs in {time.perf_counter() - t0:.1f} s ({tmp})", file=sys.stderr
        )
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}

        def series(cmd: list[str]) -> tuple[float, float, float, int]:
            times, rc = [], 0
            for _ in range(args.repeat):
                t, code = timed(cmd, env)
                times.append(t)
                rc = rc or code
            return statistics.median(times), min(times), max(times), rc

        base = series(["--version"])
        full = series(["report", "--results", str(tmp)])
        chk = series(["report", "--check", "--results", str(tmp)])
        print(
            f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; "
            f"median (min\u2013max) of {args.repeat}"
        )
        for name, (med, lo, hi, rc) in (
            ("labkit --version (baseline)", base),
            (f"labkit report, {args.runs} runs (tables + plots)", full),
            (f"labkit report --check, {args.runs} runs", chk),
        ):
            print(f"{name:45} {med:5.2f} s ({lo:.2f}\u2013{hi:.2f})  exit {rc}")
        print(
            f"target <= 5.00 s: report {'OK' if full[0] <= 5 else 'SLOW'} "
            f"(median {full[0]:.2f} s, {full[0] / base[0]:.0f}x the baseline)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
