"""Capacity under an SLO and the sweep profile's rates: which level to run next, and what the levels run say
(docs/measurement.md, "Capacity under the SLO", "The sweep profile").

Pure: the levels run so far and whether each pass met the SLO in, the next level (or None: done) and the
capacity out. The same functions choose the levels during the run (labkit/measure/workloads/load.py) and read
the capacity back from the stored records (summary/load.py), so a table regenerated from a run folder says what
the run decided.

The search: climb the ladder (the plan's levels, lowest first) to the first level that misses the SLO; bisect
between the highest level that met it and that miss, to one stream for concurrencies or to 10 % of the rate;
then run the highest level met until it has BOUNDARY_PASSES passes. It assumes that a level that meets the SLO
has every lower level meet it too (latency grows with load); a miss below a met level is reported, not
smoothed over.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

BOUNDARY_PASSES = 3  # passes of the capacity level, so its verdict is not one draw
RATE_STEP = 0.10  # a rate bisection stops when the bracket is this share of its upper end
RATE_DIGITS = 3  # significant digits of a bisected or swept rate, so its key reads 2.35, not 2.3456789


def round_rate(rate: float) -> float:
    """A rate to RATE_DIGITS significant digits."""
    if rate <= 0 or not math.isfinite(rate):
        return rate
    return round(rate, RATE_DIGITS - 1 - math.floor(math.log10(rate)))


@dataclass(frozen=True)
class Capacity:
    """What the passes say: `value` the highest level whose every pass met the SLO below any miss (None when
    the lowest level missed), its passes; `miss` the lowest level that missed in any pass (None: none did, so
    the capacity is at least `value`), and how many of its passes met the SLO out of those run (a boundary pass
    that missed once shows here, as 2 of 3)."""

    value: float | None
    miss: float | None
    passes: int
    miss_met: int = 0
    miss_passes: int = 0

    @property
    def bounded(self) -> bool:
        """Whether a miss above bounds it (else the ladder ended first)."""
        return self.miss is not None


def capacity(results: Sequence[tuple[float, bool]]) -> Capacity:
    """The capacity the (level, met) results of every pass say, in the order they ran."""
    misses = [level for level, met in results if not met]
    miss = min(misses) if misses else None
    met = sorted({level for level, ok in results if ok and (miss is None or level < miss)})
    value = next(
        (v for v in reversed(met) if all(ok for level, ok in results if level == v)),
        None,
    )
    at_miss = [ok for level, ok in results if level == miss]
    passes = sum(1 for level, _ in results if level == value) if value is not None else 0
    return Capacity(value, miss, passes, sum(at_miss), len(at_miss))


def next_level(ladder: Sequence[float], closed: bool, results: Sequence[tuple[float, bool]]) -> float | None:
    """The level to run next, None when the search is done (docstring above)."""
    ran = [level for level, _ in results]
    cap = capacity(results)
    if cap.miss is None:  # still climbing: the next rung above the last level run
        higher = [v for v in ladder if not ran or v > max(ran)]
        if higher:
            return higher[0]
    elif cap.value is None:
        return None  # the lowest level missed: nothing meets the SLO
    else:
        mid = _between(cap.value, cap.miss, closed)
        if mid is not None:
            return mid
    if cap.value is not None and cap.passes < BOUNDARY_PASSES:
        return cap.value
    return None


def _between(lo: float, hi: float, closed: bool) -> float | None:
    """The bisection's next level between a met `lo` and a missed `hi`, None when the bracket is tight."""
    if closed:
        return float((int(lo) + int(hi)) // 2) if hi - lo > 1 else None
    if (hi - lo) / hi <= RATE_STEP:
        return None
    mid = round_rate((lo + hi) / 2)
    return mid if lo < mid < hi else None


def sweep_rates(sync_rate: float, top_rate: float, n: int) -> tuple[float, ...]:
    """The sweep profile's `n` rates evenly between the synchronous level's request rate and the widest
    level's, both ends left out (they were measured as closed loops), as guidellm's sweep places them; none
    when the widest level was not faster."""
    if not (math.isfinite(sync_rate) and math.isfinite(top_rate)) or top_rate <= sync_rate or sync_rate <= 0:
        return ()
    step = (top_rate - sync_rate) / (n + 1)
    return tuple(sorted({round_rate(sync_rate + step * i) for i in range(1, n + 1)}))
