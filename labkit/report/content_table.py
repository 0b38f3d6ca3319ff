"""The table "decode c1 and acceptance by prompt content": a row per lane and content, first the lane's
default content (`synthetic`: its un-suffixed figures), then each category it measured; a column per row spec,
each taken with the category's `@<category>` suffix (docs/measurement.md, "Prompt content").

Pure: the long-form measures frame in, a finished Table out, rendered like every table (tables.to_markdown,
text.to_text). Lanes are picked as for a lane table (tables.lane_groups); a lane without content measures has
no rows. Cells are tables.cell's (ranges, or a 95 % interval from at least 3 runs) and carry the † marks of
the flags whose window covers them (a decode@code flag marks the code row only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from labkit.measures import CONTENT, content_key, split_content
from labkit.report.axis_table import axis_table
from labkit.report.specs import RowSpec, TableSpec
from labkit.report.tables import (
    DEFAULT_MEASURES,
    Table,
)

DEFAULT_CONTENT = "synthetic"  # the row of a lane's un-suffixed figures: the decode phase's synthetic prose


def categories(part: Any) -> list[str]:
    """The content categories a lane's rows hold measures of, in catalogue order."""
    found = {split_content(str(m))[1] for m in part["measure"].unique()} if len(part) else set()
    return [c for c in CONTENT if c in found]


def for_content(row: RowSpec, content: str) -> RowSpec:
    """The row spec as it reads one content's figures: its measure with the category's suffix; the default
    content keeps it as it is (and its cold figure, which only the decode phase has)."""
    if content == DEFAULT_CONTENT or row.format in ("runs", "kv", "nfs"):
        return row
    measure = row.measure or DEFAULT_MEASURES.get(row.format, "")
    try:
        key = content_key(measure, content)
    except ValueError:  # no family of that measure per content (energy): no figure
        key = ""
    return dataclasses.replace(row, measure=key, cold="")


def content_table(
    spec: TableSpec,
    measures: Any,
    boots: Mapping[str, str | None] | None = None,
    flags: Mapping[str, list[dict] | None] | None = None,
) -> Table:
    """The content table of one spec; `boots` and `flags` as for tables.build_table (interval unit, †
    marks and their notes)."""
    return axis_table(
        spec,
        measures,
        boots,
        flags,
        axis="content",
        values_of=lambda part: [DEFAULT_CONTENT, *categories(part)] if categories(part) else [],
        read_as=for_content,
    )
