"""The statistics tables and plots share: one lane's runs of one measure reduced to a Stat, lane titles.

Both the tables and the plots read the long-form measures frame (labkit.store.MEASURE_COLUMNS); computing
the median and range in one place keeps a plot's bar and the table's cell the same number.
"""

from __future__ import annotations

import math
import re
from typing import Any

from labkit.measure import median
from labkit.report.format import Stat

_PREFILL = re.compile(r"^prefill_(\d+)$")


def sim_title(title: str, simulated: bool) -> str:
    """The lane title with "(sim)" added once for a simulated lane."""
    return f"{title} (sim)" if simulated and "(sim)" not in title else title


def stat(part: Any, measure: str) -> Stat | None:
    """The Stat of `measure` over the rows of one lane, or None when the lane has no row for it."""
    rows = part[part["measure"] == measure]
    if not len(rows):
        return None
    values = [v for v in rows["value"].tolist() if not math.isnan(v)]
    los = [v for v in rows["min"].tolist() if not math.isnan(v)]
    his = [v for v in rows["max"].tolist() if not math.isnan(v)]
    mid = median(values)  # None for no values
    return Stat(
        mid,
        min(los) if los else None,
        max(his) if his else None,
        bool(rows["approx"].any()),
        rows["run"].nunique(),
    )


def prefill_points(measures: Any) -> list[tuple[str, int, Stat]]:
    """(lane title, prompt tokens, Stat) for every prefill_<P> measure: the data of the prefill plot."""
    out = []
    if not len(measures):
        return out
    # recorded (lab-note) and measured figures of one lane stay apart, as in plots._lanes
    for (recipe, variant, source, simulated), part in measures.groupby(
        ["recipe", "variant", "source", "simulated"], sort=True
    ):
        title = sim_title(str(part.sort_values("run").iloc[-1]["label"]) or recipe, bool(simulated))
        suffix = " (recorded)" if source == "recorded" else ""
        for key in sorted(part["measure"].unique()):
            m = _PREFILL.match(key)
            if m:
                found = stat(part, key)
                if found is not None:
                    out.append((f"{title} [{variant}]{suffix}", int(m.group(1)), found))
    return out
