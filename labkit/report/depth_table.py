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
from collections.abc import Mapping
from typing import Any

from labkit.measures import CACHE_STATES, depth_key, parse_key
from labkit.report.axis_table import axis_table
from labkit.report.specs import RowSpec, TableSpec
from labkit.report.tables import Table

PER_DEPTH = ("ttft_gain",)  # figures of a depth, not of one cache state: shown on its cached row


def depth_rows(part: Any) -> list[str]:
    """The row keys of one lane: "<D> uncached", "<D> cached" per depth and state measured, by depth."""
    keys = [str(m) for m in part["measure"].unique()] if len(part) else []
    parsed = [p for p in map(parse_key, keys) if p is not None and p.get("cache") is not None]
    found = {(p.get("depth"), str(p.get("cache"))) for p in parsed}
    pairs = sorted(
        ((d, c) for d, c in found if isinstance(d, int)), key=lambda f: (f[0], CACHE_STATES.index(f[1]))
    )
    return [f"{d} {state}" for d, state in pairs]


def for_depth(row: RowSpec, key: str) -> RowSpec:
    """The row spec as it reads one depth and state's figure of its measure."""
    digits, state = key.split()
    depth = int(digits)
    try:
        if row.measure in PER_DEPTH:
            measure = depth_key(row.measure, depth) if state == "cached" else ""
        else:
            measure = depth_key(row.measure, depth, state)
    except ValueError:  # no family of that measure per depth (energy): no figure
        measure = ""
    return dataclasses.replace(row, measure=measure, cold="")


def depth_table(
    spec: TableSpec,
    measures: Any,
    boots: Mapping[str, str | None] | None = None,
    flags: Mapping[str, list[dict] | None] | None = None,
) -> Table:
    """The depth table of one spec; `boots` and `flags` as for tables.build_table."""
    return axis_table(spec, measures, boots, flags, axis="depth", values_of=depth_rows, read_as=for_depth)
