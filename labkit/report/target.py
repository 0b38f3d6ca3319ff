"""The `measure.target_ci` stopping rule: are the 95 % intervals of the named measures tight enough yet?

Pure: run values in, a TargetCheck out. The lab runner asks after every repetition and stops when it says
reached or when `measure.max_runs` is hit (docs/measurement.md, "Repeating until the interval is tight").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labkit.report.stats import MIN_INTERVAL_RUNS, run_stats


@dataclass(frozen=True)
class TargetCheck:
    """Where a target_ci repetition stands: per measure the relative half-width of its interval (None while
    it has fewer than 3 values or a zero mean), the run count, and whether every measure is within target."""

    target: float
    n: int
    widths: dict[str, float | None]
    counts: dict[str, int]
    reached: bool

    def line(self, cap: int) -> str:
        """One progress line: the current width of every measure against the target."""
        parts = []
        for name, width in self.widths.items():
            if width is None:
                n = self.counts.get(name, 0)
                parts.append(f"{name} — (n={n}, an interval needs {MIN_INTERVAL_RUNS})")
            else:
                mark = "ok" if width <= self.target else "wider"
                parts.append(f"{name} ±{width * 100:.1f} % {mark}")
        state = "reached" if self.reached else f"run {self.n} of at most {cap}"
        return f"target ±{self.target * 100:g} %: " + "; ".join(parts) + f" — {state}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_ci": self.target,
            "runs": self.n,
            "relative_half_width": dict(self.widths),
            "values": dict(self.counts),
            "reached": self.reached,
            "method": "Student-t 95 % interval on run values, half-width / |mean|",
        }


def check_target(values: Mapping[str, Sequence[float | None]], target: float, n: int) -> TargetCheck:
    """The check after `n` runs; `values` holds each measure's per-run values (None where a run had none, which
    never counts towards an interval)."""
    widths: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for name, vals in values.items():
        st = run_stats([v for v in vals if v is not None])
        counts[name] = st.n
        hw = st.half_width
        widths[name] = None if hw is None or not st.mean else hw / abs(st.mean)
    reached = bool(widths) and all(w is not None and w <= target for w in widths.values())
    return TargetCheck(target, n, widths, counts, reached)
