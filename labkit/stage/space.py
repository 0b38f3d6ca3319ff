"""Whether every node has the space for its views (pure: no I/O): the per-node preflight table, views on
one filesystem counted together, and the refusal raised before anything changed on any node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from labkit.errors import LabkitError
from labkit.recipe import StagingSpec
from labkit.stage.assess import NodeAssessment
from labkit.units import format_size


class StagingRefused(LabkitError):
    """Preflight found a node without enough free space; nothing was changed on any node."""

    def __init__(self, message: str, rows: list[dict]):
        self.rows = rows
        super().__init__(message)


def preflight_rows(assessments: list[NodeAssessment]) -> list[dict]:
    """One row per node (need, free, reclaimable, margin), the binding node (least margin) marked."""
    rows: list[dict[str, Any]] = [
        {
            "node": a.node,
            "filesystem": a.fs_path,
            "need": a.need,
            "free": a.free,
            "reclaim": a.reclaim,
            "margin": a.margin,
            "binding": False,
        }
        for a in assessments
    ]
    if rows:
        min(rows, key=lambda r: r["margin"])["binding"] = True
    return rows


def preflight_table(rows: list[dict]) -> str:
    from tabulate import tabulate

    table = [
        [
            r["node"],
            r["filesystem"],
            format_size(r["need"]),
            format_size(r["free"]),
            format_size(r["reclaim"]),
            format_size(r["margin"]),
            ("SHORT " if r["margin"] < 0 else "") + ("binding" if r["binding"] else ""),
        ]
        for r in rows
    ]
    return tabulate(table, headers=["node", "filesystem", "need", "free", "reclaimable", "margin", ""])


def check_space(assessments: list[NodeAssessment], dst: str) -> list[dict]:
    """Raise StagingRefused (with the per-node table) when any node's margin is negative."""
    rows = preflight_rows(assessments)
    short = [r for r in rows if r["margin"] < 0]
    if short:
        binding = next(r for r in rows if r["binding"])
        names = ", ".join(r["node"] for r in short)
        raise StagingRefused(
            f"staging {dst} refused before changing anything on any node: not enough free space on {names} "
            f"(binding node {binding['node']}, short by {format_size(-binding['margin'])}); "
            "need = local files to copy + min_free (per filesystem: all its views' copies + their largest min_free)\n"
            + preflight_table(rows),
            rows,
        )
    return rows


def check_space_grouped(
    assessed: list[list[NodeAssessment]], specs: Sequence[StagingSpec], index: int
) -> list[dict]:
    """Space check for view `index`; views on the same filesystem of a node share its free bytes: their copies
    add up, and min_free (what must stay free on that filesystem) counts once, the largest of them."""
    combined = []
    for a in assessed[index]:
        same_fs = [b for row in assessed for b in row if b.node == a.node and b.fs_dev == a.fs_dev]
        combined.append(
            replace(
                a,
                copy_bytes=sum(b.copy_bytes for b in same_fs),
                min_free=max(b.min_free for b in same_fs),
                reclaim=sum(b.reclaim for b in same_fs),
            )
        )
    return check_space(combined, specs[index].dst)
