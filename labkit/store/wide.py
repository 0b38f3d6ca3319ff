"""The wide frame of a results root: one row per stored run, what it was (lane, variant axes and swept keys,
source, date, image, engine and labkit versions) and each of its measures as a column. Exploration otherwise
starts by pivoting the long `measures` frame by hand.

Pure: StoredRuns and the long measures frame in, a DataFrame out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from labkit.store.storedrun import StoredRun

# the columns that say what a run was, before its variant axes and its measures
META_COLUMNS = (
    "run",
    "recipe",
    "variant",
    "label",
    "source",
    "simulated",
    "date",
    "image",
    "engine_version",
    "labkit_version",
)
AXIS_PREFIX = "axis:"  # an axis whose name is already a column keeps this prefix


def _meta(run: StoredRun) -> dict[str, Any]:
    return {
        "run": run.run_id,
        "recipe": run.recipe,
        "variant": run.variant_id,
        "label": run.label,
        "source": run.source,
        "simulated": run.simulated,
        # a recorded figure's date is the note's, not its import's
        "date": run.recorded.date if run.recorded else (run.started or "")[:10] or None,
        "image": run.plan.image,
        "engine_version": run.provenance.engine_version or run.boot.engine_version,
        "labkit_version": run.labkit_version,
    }


def _axis_column(axis: str, taken: set[str]) -> str:
    return f"{AXIS_PREFIX}{axis}" if axis in taken else axis


def wide_frame(runs: Sequence[StoredRun], measures: Any, only: Iterable[str] | None = None) -> Any:
    """One row per run in `runs` (their order): META_COLUMNS, then a column per variant axis any run has
    (recipe axes and a sweep's swept keys, numbers where every value reads as one; empty where a run has no
    such axis), then a column per measure (`only`: these, in this order). A measure's cell is the run's value;
    a recorded range has none there (its min and max are in the long frame)."""
    import pandas as pd

    rows = [_meta(r) for r in runs]
    taken = set(META_COLUMNS)
    axes = sorted({a for r in runs for a in r.variants})
    for row, run in zip(rows, runs, strict=True):
        row.update({_axis_column(a, taken): run.variants.get(a) for a in axes})
    frame = pd.DataFrame(rows, columns=[*META_COLUMNS, *(_axis_column(a, taken) for a in axes)])
    for a in axes:
        col = _axis_column(a, taken)
        numbers = pd.to_numeric(frame[col], errors="coerce")
        if numbers.notna().sum() == frame[col].notna().sum():
            frame[col] = numbers
    values = _values(measures, [r.run_id for r in runs], only)
    return frame.merge(values, how="left", left_on="run", right_index=True)


def _values(measures: Any, run_ids: list[str], only: Iterable[str] | None) -> Any:
    """run id -> one column per measure, from the long frame."""
    import pandas as pd

    part = measures[measures["run"].isin(run_ids)] if len(measures) else measures
    if only is not None:
        wanted = list(only)
        part = part[part["measure"].isin(wanted)] if len(part) else part
    if not len(part):
        return pd.DataFrame(index=pd.Index([], name="run"))
    table = part.pivot_table(index="run", columns="measure", values="value", aggfunc="first", dropna=False)
    table.columns.name = None
    if only is not None:
        table = table.reindex(columns=[m for m in wanted if m in table.columns])
    return table
