"""The canary's measures and its flag (docs/measurement.md, "Slow-state canary"): the median milliseconds per
output token of the canary requests before and after the run's phases (`canary_ms_before`, `canary_ms_after`),
the slower of the two (`canary_ms`), and `slow-canary` when that is more than the plan's `slow` fraction above
the node set's healthy baseline.

Pure: records in, measures on the RunSummary; a figure and a baseline in, a flag (or None) out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.request.recording import BURST_FLAG
from labkit.measure.summary.speed import DECODE_WINDOW, put

SLOW_CANARY = "slow-canary"


def canary_measures(s: RunSummary, records: Sequence[RequestRecord]) -> None:
    """canary_ms_before, canary_ms_after: median 1000 / decode_tps of the ok canary requests (burst-read ones
    left out); canary_ms: the larger of the two measured."""
    ok = [r for r in records if r.ok and r.phase == "canary" and BURST_FLAG not in r.flags]
    found: list[tuple[str, float]] = []
    for where in ("before", "after"):
        key = f"canary_ms_{where}"
        ms: list[float | None] = [1000.0 / r.decode_tps for r in ok if r.canary == where and r.decode_tps]
        put(
            s, key, ms, f"median 1000 / decode_tps of the canary requests {where} the phases; {DECODE_WINDOW}"
        )
        value = s.measures.get(key)
        if value is not None:
            found.append((key, value))
    if found:
        s.measures["canary_ms"] = max(v for _, v in found)
        s.method["canary_ms"] = (
            f"the larger of {' and '.join(k for k, _ in found)}: the slower canary of the run"
        )


def canary_flag(
    ms: float | None, baseline: float | None, slow: float, nodes: Sequence[str]
) -> dict[str, Any] | None:
    """`slow-canary` (window boot: the whole run) when `ms` is more than `slow` above `baseline`; None without
    either figure or within the bound."""
    if ms is None or not baseline or ms <= baseline * (1.0 + slow):
        return None
    return {
        "code": SLOW_CANARY,
        "window": "boot",
        "message": f"canary {ms:.3f} ms per token on {', '.join(nodes)}, {ms / baseline - 1:+.0%} against the "
        f"node set's healthy {baseline:.3f} ms (bound +{slow:.0%}): the nodes may be in a slow state",
    }
