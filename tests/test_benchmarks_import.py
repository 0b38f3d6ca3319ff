"""Every script in benchmarks/ loads: its imports name modules and names that exist. CI runs the agreement
benchmarks and the tools table beside the tests and only reports their figures, so a module move that broke one
went unseen there
(issue 36: `from labkit.measure import prompts` after prompts moved to measure/prompt/)."""

from __future__ import annotations

import subprocess
import sys

from tests.support.record import REPO

# Each script's top level runs (its imports, its constants); its main does not: the name is not "__main__".
LOAD_ALL = """
import runpy, sys
failed = []
for path in sys.argv[1:]:
    try:
        runpy.run_path(path, run_name="benchmark_load_check")
    except Exception as e:
        failed.append(f"{path}: {type(e).__name__}: {e}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def test_every_benchmark_script_loads():
    scripts = sorted(str(p) for p in (REPO / "benchmarks").glob("*.py"))
    assert len(scripts) >= 10
    r = subprocess.run(
        [sys.executable, "-c", LOAD_ALL, *scripts], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr[-2000:]
