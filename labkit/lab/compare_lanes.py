"""`lab.compare`: two lanes or run sets of the stored results, compared behind the comparability gate."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def compare(
    a: str,
    b: str,
    *,
    measures: Sequence[str] | None = None,
    results: str | Path | None = None,
    margin: float | None = None,
    force: bool = False,
    recorded: bool = False,
) -> Any:
    """B against A, from the stored runs: `a`/`b` are `RECIPE`, `RECIPE/VARIANT_ID`, `RECIPE@axis=name,...`
    or comma-separated run ids; a lane's measured runs, or its recorded figures with `recorded` (never both).
    Returns a labkit.report.Comparison (`report.compare_text(c)` prints it)."""
    from labkit import report
    from labkit.store import load_results

    data = load_results(results)
    side_a, side_b = report.select(data, a, recorded), report.select(data, b, recorded)
    kw = {} if margin is None else {"margin": float(margin)}
    return report.compare_sides(side_a, side_b, measures=measures, force=force, **kw)
