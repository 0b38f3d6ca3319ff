"""The table "TTFT, prefill and decode by depth": a row per lane, context depth and cache state; a column per
row spec, whose measure names the figure at a depth (`ttft`, `prefill`, `decode`, `new_tokens`, `hit`,
`hit_expected`, `prompt_tokens`, `ttft_gain`), read as `depth_<D>_<m>` on an uncached row and
`depth_<D>_<m>_cached` on a cached one (`ttft_gain`, one figure per depth, on the cached row) (docs/measurement.md,
"Context depth").

Pure: the long-form measures frame in, a finished Table out, rendered like every table (axis_table.py). Lanes
are picked as for a lane table; a lane without depth measures has no rows. Cells carry the † marks of the
flags whose window covers them (`depth_<D>`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from labkit.measures import DEPTH_STATES, depth_key
from labkit.report.axis_table import axis_table
from labkit.report.specs import RowSpec, TableSpec
from labkit.report.tables import RunFlags, Table

DEPTH = re.compile(r"depth_(\d+)_[a-z_]+?(_cached)?")
PER_DEPTH = ("ttft_gain",)  # figures of a depth, not of one cache state: shown on its cached row


def depth_rows(part: Any) -> list[str]:
    """The row keys of one lane: "<D> uncached", "<D> cached" per depth and state measured, by depth."""
    keys = [str(m) for m in part["measure"].unique()] if len(part) else []
    found = set()
    for key in keys:
        if (hit := DEPTH.fullmatch(key)) and not key.endswith(PER_DEPTH):
            found.add((int(hit.group(1)), "cached" if hit.group(2) else "uncached"))
    order = list(DEPTH_STATES)
    return [f"{d} {state}" for d, state in sorted(found, key=lambda f: (f[0], order.index(f[1])))]


def for_depth(row: RowSpec, key: str) -> RowSpec:
    """The row spec as it reads one depth and state's figure of its measure."""
    digits, state = key.split()
    depth = int(digits)
    if row.measure in PER_DEPTH:
        measure = f"depth_{depth}_{row.measure}" if state == "cached" else ""
    else:
        measure = depth_key(row.measure, depth, state)
    return dataclasses.replace(row, measure=measure, cold="")


def depth_table(
    spec: TableSpec,
    measures: Any,
    boots: Mapping[str, str | None] | None = None,
    flags: RunFlags | None = None,
) -> Table:
    """The depth table of one spec; `boots` and `flags` as for tables.build_table."""
    return axis_table(spec, measures, boots, flags, axis="depth", values_of=depth_rows, read_as=for_depth)
