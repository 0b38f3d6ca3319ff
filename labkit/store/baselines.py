"""Healthy baselines beside the runs: per-node SM clocks (`results/_baselines/<node>.json`) and per node set and
lane the slow-state canary (`results/_baselines/canary/<recipe hash>-<node set>.json`), updated from healthy
runs (docs/measurement.md, "Node telemetry", "Slow-state canary").

A GB10 GPU can stick in a low-power state that only a power cycle clears; a run on such a node reads as a
slow lane. The telemetry of a run flags a window whose SM-clock median is well below this node's recorded
healthy clock (docs/measurement.md, "Node telemetry"). The baseline is the median of the last KEEP healthy
run medians, so one odd run moves it little, and it lives beside the runs it came from. The folder name
starts with "_" so no recipe can take it.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from labkit.store.files import ResultsError, atomic_write_text, check_segment, dumps, now_iso, results_root

BASELINE_DIR = "_baselines"
KEEP = 10  # healthy run medians a baseline is the median of
METHOD = f"median of the SM-clock medians (MHz) of the last {KEEP} healthy runs' unflagged windows"


def baseline_path(root: str | os.PathLike[str] | None, node: str) -> Path:
    return results_root(root) / BASELINE_DIR / f"{check_segment(node, 'node name')}.json"


def read_baselines(root: str | os.PathLike[str] | None, nodes: Iterable[str]) -> dict[str, float]:
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
    root: str | os.PathLike[str] | None, medians: Mapping[str, float], run_id: str
) -> dict[str, float]:
    """Add one healthy run's per-node SM-clock medians; returns the new {node: baseline MHz}. A run already
    recorded for a node is not counted twice."""
    return {
        node: _add(baseline_path(root, node), "sm_clock_mhz", float(mhz), run_id, {"node": node}, METHOD)
        for node, mhz in sorted(medians.items())
    }


CANARY_FIELD = "canary_ms"
CANARY_METHOD = (
    f"median of the canary ms per token of the last {KEEP} healthy runs of this lane on these nodes"
)


def canary_path(root: str | os.PathLike[str] | None, recipe_hash: str, nodes: Iterable[str]) -> Path:
    """The canary baseline of one lane (its recipe hash) on one node set (any order)."""
    key = hashlib.sha256(",".join(sorted(nodes)).encode()).hexdigest()[:10]
    name = check_segment(f"{recipe_hash}-{key}.json", "canary baseline")
    return results_root(root) / BASELINE_DIR / "canary" / name


def read_canary(root: str | os.PathLike[str] | None, recipe_hash: str, nodes: Iterable[str]) -> float | None:
    """The healthy canary ms per token of this lane on these nodes; None before its first healthy run."""
    path = canary_path(root, recipe_hash, nodes)
    if not path.is_file():
        return None
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))[CANARY_FIELD])
    except (ValueError, KeyError, TypeError) as e:
        raise ResultsError(f"{path}: not a canary baseline ({e}); fix or remove it")


def update_canary(
    root: str | os.PathLike[str] | None, recipe_hash: str, nodes: Iterable[str], ms: float, run_id: str
) -> float:
    """Add one healthy run's canary figure; returns the new baseline ms per token."""
    names = sorted(nodes)
    extra = {"recipe_hash": recipe_hash, "nodes": names}
    return _add(canary_path(root, recipe_hash, names), CANARY_FIELD, ms, run_id, extra, CANARY_METHOD)


def _add(path: Path, field: str, value: float, run_id: str, extra: dict[str, Any], method: str) -> float:
    """One run's figure added to a baseline file (a run already there is not counted twice), the baseline the
    median of the last KEEP; written atomically. Returns the new baseline."""
    runs: list[dict[str, Any]] = []
    if path.is_file():
        try:
            runs = list(json.loads(path.read_text(encoding="utf-8")).get("runs") or [])
        except ValueError as e:
            raise ResultsError(f"{path}: not a baseline ({e}); fix or remove it")
    if all(r.get("run") != run_id for r in runs):
        runs.append({"run": run_id, field: float(value)})
    runs = runs[-KEEP:]
    baseline = statistics.median(float(r[field]) for r in runs)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {**extra, field: baseline, "runs": runs, "updated": now_iso(), "method": method}
    atomic_write_text(path, dumps(doc))
    return baseline
