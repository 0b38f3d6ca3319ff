"""How long the default bench notebook takes end to end on the sim lane (target: <= 90 s on 2 cores).

Runs `labkit run bench -p recipe sim` (papermill, real kernel, the simulator booted, measured and torn
down, the run stored) into a temp results folder, and, as a baseline measured in the same run, the same
notebook with `-p dry_run True` (kernel start, imports, plan; nothing booted). Prints both wall times, the
measured plan's share and the ratio to the target; exits 1 when the target is missed.

    python benchmarks/notebook_speed.py [--spec none|dspark]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 90.0


def timed(args: list[str], env: dict) -> float:
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "labkit", *args], cwd=REPO, env=env, capture_output=True, text=True
    )
    if r.returncode:
        sys.exit(f"labkit {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default="none")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="labkit-nbspeed-") as tmp:
        env = {**os.environ, "LABKIT_RESULTS": str(Path(tmp) / "results"), "PYTHONPATH": str(REPO)}
        common = ["run", "bench", "-p", "recipe", "sim", "-p", "spec", args.spec]
        dry = timed([*common, "-p", "dry_run", "True", "-o", f"{tmp}/dry.ipynb"], env)
        full = timed([*common, "-o", f"{tmp}/full.ipynb"], env)
    load = os.getloadavg()[0]
    print(f"bench notebook, sim lane (spec={args.spec}), load average {load:.2f}")
    print(f"  dry run (kernel, imports, plan)  {dry:6.1f} s")
    print(
        f"  full run (boot, measure, store)  {full:6.1f} s   target <= {TARGET_S:.0f} s "
        f"({full / TARGET_S:.2f}x of target; {full - dry:.1f} s beyond the dry run)"
    )
    return 0 if full <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
