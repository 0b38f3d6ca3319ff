"""How long a lane's plan will take, before it runs: the plan's requests at the lane's stored speeds (else its
recorded ones), plus its boot and its staging, each part saying which figures it used. `labkit show`, the
notebooks' dry runs and `labkit sweep --dry-run` print it: on the lab's cluster a boot from the NAS and the
staging of a view each take minutes (the lab note's own figures), so a plan's length is worth knowing first.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.recipe import LanePlan

STORED = "measured"


@dataclass(frozen=True)
class Estimate:
    """One plan's expected duration in parts; a part is None when nothing stored tells it, and `used` says
    where each known part came from."""

    requests: int
    measure_s: float | None
    boot_s: float | None
    staging_s: float | None
    used: tuple[str, ...]

    @property
    def total_s(self) -> float | None:
        """The sum of the known parts; None when the measurement's own length is unknown."""
        if self.measure_s is None:
            return None
        return self.measure_s + (self.boot_s or 0.0) + (self.staging_s or 0.0)

    def line(self) -> str:
        """'estimate: ~14 min (268 requests; measure 4.2 min, boot 10 min, staging 0 s); from …' for people; a
        part nothing stored tells is named as left out."""
        if self.total_s is None:
            return (
                f"estimate: {self.requests} requests; no stored speed of this lane to time them "
                f"({'; '.join(self.used)})"
            )
        parts = ", ".join(
            f"{name} {duration(value)}" if value is not None else f"{name} not known, left out"
            for name, value in (
                ("measure", self.measure_s),
                ("boot", self.boot_s),
                ("staging", self.staging_s),
            )
        )
        total = duration(self.total_s)
        return f"estimate: ~{total} ({self.requests} requests; {parts}); from {'; '.join(self.used)}"


def duration(seconds: float) -> str:
    """40 s, 4.2 min, 1.6 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _seconds(text: str | None) -> float | None:
    try:
        return dt.datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None


def lane_runs(data: Any, plan: LanePlan, source: str) -> list[Any]:
    """The complete runs of the plan's recipe of `source` whose variant choices include the plan's (a recorded
    run may sit under an older, shorter variant id); sweep points only when the plan is that point."""
    want = dict(plan.variants)
    return [
        d
        for d in data.docs.values()
        if d.recipe == plan.recipe
        and d.source == source
        and (d.variant_id == plan.variant_id or (not d.provenance.sweep_axes and _within(d.variants, want)))
    ]


def _within(stored: Any, want: dict[str, str]) -> bool:
    return all(want.get(axis) == name for axis, name in stored.items())


def _median(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return statistics.median(got) if got else None


def _per_request(run: Any, frame: Any) -> float | None:
    """A stored run's wall time per request, its boot and staging left out (the first run's folder is made
    before the lane stages and boots)."""
    start, end = _seconds(run.started), _seconds(run.finished)
    if start is None or end is None or not run.n_requests:
        return None
    mine = frame[frame["run"] == run.run_id]
    setup = float(mine[mine["measure"].isin(["boot_s", "staging_s"])]["value"].sum()) if len(mine) else 0.0
    wall = end - start - setup
    return wall / run.n_requests if wall > 0 else None


def _lane_figure(frame: Any, runs: Sequence[Any], measure: str) -> float | None:
    """The median over `runs` of a measure (a recorded range's middle when it has no value)."""
    part = frame[frame["run"].isin([r.run_id for r in runs]) & (frame["measure"] == measure)]
    values = [
        v if v == v else (lo + hi) / 2  # NaN: a recorded range
        for v, lo, hi in zip(part["value"], part["min"], part["max"], strict=True)
    ]
    return _median(v for v in values if v == v)


def _recorded_request_s(plan: LanePlan, frame: Any, runs: Sequence[Any]) -> tuple[float | None, str]:
    """Seconds per request from recorded speeds: the plan's answer length at decode c1, and its first prompt
    length at the recorded prefill of the nearest length."""
    decode = _lane_figure(frame, runs, "decode_c1")
    if not decode:
        return None, ""
    d, p = plan.measure.decode, plan.measure.prefill
    seconds = d.output_tokens / decode
    how = f"recorded decode c1 {decode:.1f} t/s for {d.output_tokens}-token answers"
    lengths = sorted(p.prompt_tokens)
    if lengths:
        rates = {n: _lane_figure(frame, runs, f"prefill_{n}") for n in lengths}
        known = {n: r for n, r in rates.items() if r}
        if known:
            n = min(known)
            seconds += n / known[n]
            how += f", prefill {known[n]:.0f} t/s for {n:,}-token prompts"
    return seconds, how


def estimate(
    plan: LanePlan, results: str | Path | None = None, *, like: LanePlan | None = None, data: Any = None
) -> Estimate:
    """The plan's duration from the stored results (`data`, else load_results(results)): its requests at its
    lane's measured seconds per request (else at its recorded speeds; `like`: a lane to borrow them from when
    this one has none, a sweep's base for its points), its boot and staging times from the lane's stored boots."""
    from labkit.measure import planned_requests
    from labkit.store import load_results

    data = load_results(results) if data is None else data
    m = plan.measure
    # each repetition is a run folder of its own (lab/runs.py): only the first meets a cold engine
    once = dataclasses.replace(m, runs=1)
    requests = planned_requests(once, True) + (m.runs - 1) * planned_requests(once, False)
    frame, used = data.measures, []
    measure_s = None
    for lane in [plan] + ([like] if like is not None else []):
        measured = lane_runs(data, lane, STORED)
        per = _median(_per_request(r, frame) for r in measured)
        if per is not None:
            measure_s = requests * per
            used.append(
                f"{per:.2f} s a request, the median of {len(measured)} stored runs of {lane.recipe}/{lane.variant_id}"
            )
            break
        recorded = lane_runs(data, lane, "recorded")
        per, how = _recorded_request_s(lane, frame, recorded)
        if per is not None:
            measure_s = requests * per
            used.append(f"{how} ({lane.recipe}; requests of other workloads timed alike)")
            break
    else:
        used.append(f"no stored or recorded run of {plan.recipe}/{plan.variant_id}")
    boot_s = staging_s = None
    for lane in [plan] + ([like] if like is not None else []):
        runs = lane_runs(data, lane, STORED)
        if boot_s is None and (boot_s := _lane_figure(frame, runs, "boot_s")) is not None:
            used.append(f"boot {duration(boot_s)}: the median of {lane.recipe}'s stored boots")
        if plan.staging and staging_s is None:
            staging_s = _lane_figure(frame, runs, "staging_s")
            if staging_s is not None:
                used.append(f"staging {duration(staging_s)}: the median of {lane.recipe}'s stored stagings")
    if not plan.staging:
        staging_s = 0.0
    return Estimate(requests, measure_s, boot_s, staging_s, tuple(used))
