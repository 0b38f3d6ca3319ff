"""Interval cells of the tables: a number row's 95 % interval over runs, with what the runs are beside it.

An interval over runs on one boot shows only run-to-run spread on one engine; across boots the spread can be
several times wider, so every interval cell says which it is ("50.0 [45.0, 55.0] n=3 runs, 1 boot"), and the
note under the table says what each such tag means. Pure: one lane's rows of the measures frame in, a
finished string out. docs/measurement.md, "Intervals over runs".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from labkit.report.format import Stat, fmt_few, fmt_interval
from labkit.report.stats import MIN_INTERVAL_RUNS, run_stats, run_values

if TYPE_CHECKING:
    from labkit.report.specs import RowSpec

# what an interval over each unit (stats.unit_of) covers, for the note under a table
MEANINGS = {
    "boots": "each run booted its lane, so the interval covers boot-to-boot variation",
    "runs on one boot": (
        "several runs on one engine, so only run-to-run variation, which can be several times narrower "
        "than the spread across boots"
    ),
    "runs on k boots": "several runs on each of k boots, a mix of both",
    "runs": "the stored runs do not say which boot they ran on; they may share one",
}


def unit_tag(n: int, unit: str) -> str:
    """What the n values of an interval are, as written beside it: 'n=3 boots', 'n=3 runs, 1 boot',
    'n=5 runs, 2 boots', 'n=3 runs, boots unknown' (stats.unit_of's units)."""
    if unit == "runs on one boot":
        return f"n={n} runs, 1 boot"
    if unit.startswith("runs on ") and unit.endswith(" boots"):
        return f"n={n} runs, {unit.removeprefix('runs on ')}"
    if unit == "runs":
        return f"n={n} runs, boots unknown"
    return f"n={n} {unit}"


def interval_cell(row: RowSpec, part: Any, main: Stat | None, unit: str, form: str) -> str:
    """The interval form of a number row for one lane (without its cold figure): mean and interval with the
    unit tag from at least MIN_INTERVAL_RUNS run values, else the range form with its n."""
    rs = run_stats(run_values(part, row.measure), unit)
    if rs.lo is None or rs.hi is None or rs.mean is None:
        few = None if main is None else Stat(main.median, main.lo, main.hi, main.approx, rs.n or main.n)
        return fmt_few(few, row.decimals, row.thousands)
    approx = main is not None and main.approx
    text = fmt_interval(rs.mean, rs.lo, rs.hi, form, row.decimals, row.thousands, approx)
    return f"{text} {unit_tag(rs.n, unit)}"


class Counted(Protocol):
    """What the note reads of a table's column (tables.LaneColumn): its run count and what one run value is.
    A protocol, so this module, which tables.py imports, does not import tables.py back."""

    @property
    def runs(self) -> int: ...

    @property
    def unit(self) -> str: ...


def interval_note(lanes: Sequence[Counted], forms: set[str]) -> str:
    """The note under a table with interval rows: what the interval is, what the tag beside it says for the
    units its lanes have, and the fewer-than-3-runs rule."""
    shape = " or ".join(
        s for f, s in (("pm", "mean \u00b1 half-width"), ("ci", "mean [low, high]")) if f in forms
    )
    units = {"runs on k boots" if u.endswith(" boots") and u != "boots" else u for u in _units(lanes)}
    meant = "; ".join(
        f"{tag}: {MEANINGS[u]}"
        for u, tag in (
            ("boots", '"n=\u2026 boots"'),
            ("runs on one boot", '"n=\u2026 runs, 1 boot"'),
            ("runs on k boots", '"n=\u2026 runs, k boots"'),
            ("runs", '"n=\u2026 runs, boots unknown"'),
        )
        if u in units
    )
    return (
        f"Intervals: {shape}, a 95 % Student-t interval on the run values (mean \u00b1 t(0.975, n\u22121)"
        f"\u00b7s/\u221an), one value per run, followed by what the n values are over"
        + (f" ({meant})" if meant else "")
        + f". From fewer than {MIN_INTERVAL_RUNS} runs no interval is shown: the cell keeps the median "
        '(min\u2013max) form with its run count, e.g. "49.1 (47.8\u201350.7) n=2".'
    )


def _units(lanes: Sequence[Counted]) -> list[str]:
    return [lane.unit for lane in lanes if lane.runs]
