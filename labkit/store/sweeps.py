"""Sweep records: `results/_sweeps/<recipe>/<name>.json`, what one sweep consists of and how each point ended.

A sweep's points are ordinary run folders (`results/<recipe>/<variant id>/<run id>/`); the record only says
which variant ids belong to the sweep, their swept values, which runs make each point, and the reason a point
failed. The sweep table and plot are built from it and the run folders (docs/sweeps.md, "The sweep record").
It is rewritten atomically after every point, so a crash loses at most the point in progress. The folder
name starts with "_" so no recipe can take it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labkit.store.files import ResultsError, atomic_write_text, check_segment, dumps, now_iso, results_root

SWEEP_DIR = "_sweeps"
SWEEP_SCHEMA = "labkit.sweep"
SWEEP_SCHEMA_VERSION = 1
# how a point ended: measured now, skipped because stored runs with identical provenance exist, failed
# (boot error, OOM, no request succeeded: `reason` says which), or not reached (the sweep stopped before it)
STATUSES = ("measured", "resumed", "failed", "pending")


@dataclass
class SweepPoint:
    """One point: its variant id, the swept values by axis short name, its status, runs and failure reason."""

    variant_id: str
    values: dict[str, Any]
    status: str = "pending"
    runs: list[str] = field(default_factory=list)
    reason: str = ""


@dataclass
class SweepAxisRecord:
    """One swept key as stored: its path, the dotted form the user wrote, the short name ids use, values."""

    key: list[str]
    dotted: str
    short: str
    values: list[Any]


@dataclass
class SweepRecord:
    """A sweep: the recipe, the variants every point shares, the axes, grid or zipped, and the points in
    order (first axis slowest)."""

    name: str
    recipe: str
    base_variants: dict[str, str]
    axes: list[SweepAxisRecord]
    zipped: bool = False
    points: list[SweepPoint] = field(default_factory=list)
    updated: str = ""
    # environment variables run although the engine's code never mentions them: {name: the reason given}
    allowed_env: dict[str, str] = field(default_factory=dict)

    def point(self, variant_id: str) -> SweepPoint:
        for p in self.points:
            if p.variant_id == variant_id:
                return p
        raise KeyError(variant_id)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SWEEP_SCHEMA, "schema_version": SWEEP_SCHEMA_VERSION, **asdict(self)}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> SweepRecord:
        return cls(
            name=str(doc["name"]),
            recipe=str(doc["recipe"]),
            base_variants=dict(doc.get("base_variants") or {}),
            axes=[SweepAxisRecord(**a) for a in doc["axes"]],
            zipped=bool(doc.get("zipped", False)),
            points=[SweepPoint(**p) for p in doc.get("points") or ()],
            updated=str(doc.get("updated") or ""),
            allowed_env=dict(doc.get("allowed_env") or {}),
        )


def sweep_path(root: str | os.PathLike[str] | None, recipe: str, name: str) -> Path:
    return (
        results_root(root)
        / SWEEP_DIR
        / check_segment(recipe, "recipe")
        / f"{check_segment(name, 'sweep name')}.json"
    )


def write_sweep(root: str | os.PathLike[str] | None, record: SweepRecord) -> Path:
    """Write (atomically) and return the record's path; `updated` is set to now."""
    record.updated = now_iso()
    path = sweep_path(root, record.recipe, record.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, dumps(record.to_dict()))
    return path


def read_sweep(path: str | os.PathLike[str]) -> SweepRecord:
    """One record; ResultsError naming the file when it is unreadable or not a sweep record."""
    file = Path(path)
    try:
        doc = json.loads(file.read_text(encoding="utf-8"))
        if doc.get("schema") != SWEEP_SCHEMA or int(doc.get("schema_version", 0)) > SWEEP_SCHEMA_VERSION:
            raise ValueError(f"schema {doc.get('schema')!r} version {doc.get('schema_version')!r}")
        return SweepRecord.from_dict(doc)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ResultsError(f"{file}: not a labkit sweep record ({e}); fix or remove it")


def load_sweeps(root: str | os.PathLike[str] | None) -> list[SweepRecord]:
    """Every sweep record under the results folder, by recipe and name."""
    base = results_root(root) / SWEEP_DIR
    return [read_sweep(p) for p in sorted(base.glob("*/*.json"))] if base.is_dir() else []
