"""The table "TTFT by turn": a row per lane and agentic session turn, then a row per idle length it measured;
a column per row spec, whose measure names the figure of a turn (`ttft`, `prefill`, `new_tokens`, `hit`,
`hit_expected`, `decode`, `prompt_tokens`), read as `agentic_<m>_t<T>` on a turn's row and `idle_<S>_<m>` on
an idle row (docs/measurement.md, "Agentic sessions", "Idle turns").

Pure: the long-form measures frame in, a finished Table out, rendered like every table. Lanes are picked as
for a lane table (tables.lane_groups); a lane with neither session nor idle measures has no rows. Cells are
tables.cell's and carry the † marks of the flags whose window covers them (`agentic`, `idle_<S>`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from labkit.report.axis_table import axis_table
from labkit.report.specs import RowSpec, TableSpec
from labkit.report.tables import RunFlags, Table

TURN = re.compile(r"agentic_[a-z_]+_t(\d+)")
IDLE = re.compile(r"idle_(\d+)_[a-z]+")


def turn_rows(part: Any) -> list[str]:
    """The row keys of one lane: "turn <T>" per session turn measured, then "idle <S> s" per idle length."""
    keys = [str(m) for m in part["measure"].unique()] if len(part) else []
    turns = sorted({int(m.group(1)) for k in keys if (m := TURN.fullmatch(k))})
    idles = sorted({int(m.group(1)) for k in keys if (m := IDLE.fullmatch(k))})
    return [f"turn {t}" for t in turns] + [f"idle {s} s" for s in idles]


def for_turn(row: RowSpec, key: str) -> RowSpec:
    """The row spec as it reads one turn's (or idle length's) figure of its measure."""
    kind, number = key.split()[:2]
    measure = f"agentic_{row.measure}_t{number}" if kind == "turn" else f"idle_{number}_{row.measure}"
    return dataclasses.replace(row, measure=measure, cold="")


def turn_table(
    spec: TableSpec,
    measures: Any,
    boots: Mapping[str, str | None] | None = None,
    flags: RunFlags | None = None,
) -> Table:
    """The turn table of one spec; `boots` and `flags` as for tables.build_table."""
    return axis_table(spec, measures, boots, flags, axis="turn", values_of=turn_rows, read_as=for_turn)
