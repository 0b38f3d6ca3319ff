"""Per-node healthy SM-clock baselines: `results/_baselines/<node>.json`, updated from healthy runs.

A GB10 GPU can stick in a low-power state that only a power cycle clears; a run on such a node reads as a
slow lane. The telemetry of a run flags a window whose SM-clock median is well below this node's recorded
healthy clock (docs/measurement.md, "Node telemetry"). The baseline is the median of the last KEEP healthy
run medians, so one odd run moves it little, and it lives beside the runs it came from. The folder name
starts with "_" so no recipe can take it.
"""

from __future__ import annotations

import json
import os
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path

from labkit.store.files import ResultsError, atomic_write_text, check_segment, dumps, now_iso, results_root

BASELINE_DIR = "_baselines"
KEEP = 10  # healthy run medians a baseline is the median of
METHOD = f"median of the SM-clock medians (MHz) of the last {KEEP} healthy runs' unflagged windows"


def baseline_path(root: str | os.PathLike | None, node: str) -> Path:
    return results_root(root) / BASELINE_DIR / f"{check_segment(node, 'node name')}.json"


def read_baselines(root: str | os.PathLike | None, nodes: Iterable[str]) -> dict[str, float]:
    """{node: healthy SM clock in MHz} for the nodes that have a baseline; ResultsError naming a bad file."""
    out: dict[str, float] = {}
    for node in nodes:
        path = baseline_path(root, node)
        if not path.is_file():
            continue
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            out[node] = float(doc["sm_clock_mhz"])
        except (ValueError, KeyError, TypeError) as e:
            raise ResultsError(f"{path}: not a node baseline ({e}); fix or remove it")
    return out


def update_baselines(
    root: str | os.PathLike | None, medians: Mapping[str, float], run_id: str
) -> dict[str, float]:
    """Add one healthy run's per-node SM-clock medians; returns the new {node: baseline MHz}. A run already
    recorded for a node is not counted twice."""
    out: dict[str, float] = {}
    for node, mhz in sorted(medians.items()):
        path = baseline_path(root, node)
        runs: list[dict] = []
        if path.is_file():
            try:
                runs = list(json.loads(path.read_text(encoding="utf-8")).get("runs") or [])
            except ValueError as e:
                raise ResultsError(f"{path}: not a node baseline ({e}); fix or remove it")
        if all(r.get("run") != run_id for r in runs):
            runs.append({"run": run_id, "sm_clock_mhz": float(mhz)})
        runs = runs[-KEEP:]
        value = statistics.median(float(r["sm_clock_mhz"]) for r in runs)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"node": node, "sm_clock_mhz": value, "runs": runs, "updated": now_iso(), "method": METHOD}
        atomic_write_text(path, dumps(doc))
        out[node] = value
    return out
