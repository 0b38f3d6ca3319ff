"""When an open loop's requests are meant to be sent, and whether the client kept to it
(docs/measurement.md, "Load levels and arrival schedules").

Pure functions: a level's rate, arrival kind and seed in, its intended send times out, in seconds from the
level's start (the first at 0); then the client-bound rule over what the sender did with them. The schedule is
drawn from its own `random.Random` seeded with a string, so two lanes (or two runs) given the same seed send at
the same intended times, whatever else the run draws. Three kinds, with mean gap 1/R at rate R:
- `constant`: every gap is 1/R;
- `poisson`: exponential gaps of mean 1/R (arrivals of a Poisson process);
- `gamma`: gamma gaps of shape b and scale 1/(R·b), b the burstiness: mean 1/R, coefficient of variation
  1/√b; b = 1 is Poisson, b < 1 burstier, b > 1 more even. The same convention as `vllm bench serve
  --burstiness`.

A ramp-up (`ramped`) moves the times of a steady schedule so that the rate rises linearly from 0 over its first
seconds. An optional concurrency cap (`measure.load.max_concurrency`) is not applied here: the schedule says when each
request should go, and the sender holds a request back while the cap is reached; the time it was held shows as
that request's lateness, which the client-bound rule then judges like any other lateness.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from labkit.measure.summary.latency import percentile as linear_percentile

Arrival = Literal["constant", "poisson", "gamma"]
ARRIVALS: tuple[Arrival, ...] = ("constant", "poisson", "gamma")  # as labkit/recipe/loadplan.py offers them
MAX_SENDS = 10_000_000  # intended sends of one level at most: a typo guard (rate x duration)
LATENESS_FLOOR_S = 0.001  # the client-bound threshold is never below this (measure.load.lateness_floor_ms)
LATENESS_SHARE = 0.05  # ... nor below this share of the mean gap (measure.load.lateness_share)
LATENESS_PERCENTILE = 99.0  # the percentile of the per-request lateness the threshold is compared with


def _finite(value: object) -> float | None:
    """`value` as a float when it is a finite number (a bool is not one), else None; typed `object` because
    callers pass what they were given, checked here."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _positive(value: object, name: str) -> float:
    """`value` as a float when it is a finite number > 0; else a ValueError naming `name`."""
    number = _finite(value)
    if number is None or number <= 0:
        raise ValueError(f"{name}: expected a finite number > 0, got {value!r}")
    return number


def level_seed(seed: str | int | None, rate: float) -> str:
    """The schedule seed of the level at `rate` in a run seeded `seed` (measure.seed; None reads as "none"):
    a level's arrivals depend on its rate and the seed only, not on which other rates the plan has."""
    return f"{seed}/rate={float(rate)!r}"


def gap_sampler(
    rate: float, arrival: str, rng: random.Random, burstiness: float = 1.0
) -> Callable[[], float]:
    """A function drawing one gap (seconds) after another from `rng`, for `arrival` at `rate` requests/s."""
    rate = _positive(rate, "rate")
    if arrival == "constant":
        gap = 1.0 / rate
        return lambda: gap
    if arrival == "poisson":
        return lambda: rng.expovariate(rate)
    if arrival == "gamma":
        shape = _positive(burstiness, "burstiness")
        scale = 1.0 / (rate * shape)
        return lambda: rng.gammavariate(shape, scale)
    raise ValueError(f"arrival: expected one of {', '.join(ARRIVALS)}, got {arrival!r}")


def send_times(
    rate: float,
    seed: str,
    *,
    arrival: str = "poisson",
    burstiness: float | None = None,
    requests: int | None = None,
    duration_s: float | None = None,
) -> tuple[float, ...]:
    """Intended send times (seconds from the level's start, non-decreasing, the first at 0) of one level at
    `rate` requests/s: `requests` of them, or every one before `duration_s` (exactly one of the two).
    `burstiness` is gamma's shape b (default 1: Poisson) and refused with another arrival; `seed` is a string
    (`level_seed`), so equal arguments give equal times. Raises ValueError naming the argument at fault."""
    rate = _positive(rate, "rate")
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival: expected one of {', '.join(ARRIVALS)}, got {arrival!r}")
    if burstiness is not None and arrival != "gamma":
        raise ValueError(f"burstiness: only gamma arrivals have one, and arrival is {arrival!r}")
    if not isinstance(seed, str):
        raise ValueError(f"seed: expected a string (level_seed), got {type(seed).__name__}")
    if (requests is None) == (duration_s is None):
        raise ValueError("requests, duration_s: give exactly one of the two")
    if requests is not None and (isinstance(requests, bool) or not isinstance(requests, int) or requests < 1):
        raise ValueError(f"requests: expected an integer >= 1, got {requests!r}")
    if duration_s is not None:
        duration_s = _positive(duration_s, "duration_s")
    expected = requests if requests is not None else rate * (duration_s or 0.0)
    if expected > MAX_SENDS:
        raise ValueError(f"rate, duration_s: {expected:,.0f} sends in one level, above {MAX_SENDS:,}")
    return _times(
        rate, arrival, random.Random(seed), 1.0 if burstiness is None else burstiness, requests, duration_s
    )


def _times(
    rate: float,
    arrival: str,
    rng: random.Random,
    burstiness: float,
    requests: int | None,
    end_s: float | None,
) -> tuple[float, ...]:
    """The first `requests` times, or those before `end_s`; a constant schedule's i-th time is exactly i/R
    (computed, not summed, so no rounding piles up)."""
    draw = gap_sampler(rate, arrival, rng, burstiness)
    out: list[float] = []
    t = 0.0
    while (len(out) < requests) if requests is not None else (t < (end_s or 0.0)):
        out.append(t)
        t = (len(out) / rate) if arrival == "constant" else t + draw()
    return tuple(out)


def ramped(times: Sequence[float], ramp_s: float) -> tuple[float, ...]:
    """A steady schedule (`send_times`) with its rate ramped linearly from 0 up to R over the first `ramp_s`
    seconds (measure.load.ramp_up_s): each time u moves to the t at which the ramped rate has sent as many
    requests as the steady one by u, t = √(2·ramp_s·u) while u < ramp_s/2, else u + ramp_s/2. The order and the
    count stay; the level gets ramp_s/2 longer (a level given by duration D draws its steady schedule for
    D − ramp_s/2). For Poisson arrivals the result is exactly a Poisson process of that rising rate."""
    ramp = _finite(ramp_s)
    if ramp is None or ramp < 0:
        raise ValueError(f"ramp_s: expected a finite number >= 0, got {ramp_s!r}")
    if ramp == 0:
        return tuple(times)
    half = ramp / 2.0
    return tuple(math.sqrt(2.0 * ramp * u) if u < half else u + half for u in times)


def lateness_threshold(
    mean_gap_s: float, floor_s: float = LATENESS_FLOOR_S, share: float = LATENESS_SHARE
) -> float:
    """The lateness (seconds) a level's sends may reach at the judged percentile: max(floor, share · mean gap),
    the mean gap being the schedule's 1/R."""
    mean_gap_s = _positive(mean_gap_s, "mean_gap_s")
    floor_s = _positive(floor_s, "floor_s")
    share = _positive(share, "share")
    if share >= 1.0:
        raise ValueError(f"share: expected a fraction of the mean gap below 1, got {share!r}")
    return max(floor_s, share * mean_gap_s)


@dataclass(frozen=True)
class ClientBound:
    """The client-bound verdict of one level: the lateness at the judged percentile, the threshold it was held
    against, and whether it exceeded it (`bound`: the level measured the client, not only the engine)."""

    late_s: float  # the percentile of actual − intended send time, seconds
    threshold_s: float
    percentile: float
    bound: bool


def client_bound(
    lateness_s: Sequence[float],
    mean_gap_s: float,
    *,
    floor_s: float = LATENESS_FLOOR_S,
    share: float = LATENESS_SHARE,
    percentile: float = LATENESS_PERCENTILE,
    quantile: Callable[[Sequence[float], float], float | None] = linear_percentile,
) -> ClientBound:
    """Whether a level is client-bound: the `percentile` (p99) of its requests' lateness (actual − intended send
    time, seconds; one per request sent) above `lateness_threshold(mean_gap_s, floor_s, share)`. `quantile`
    computes the percentile (linear interpolation by default)."""
    if not lateness_s:
        raise ValueError("lateness_s: no requests to judge")
    for i, late in enumerate(lateness_s):
        if _finite(late) is None:
            raise ValueError(f"lateness_s[{i}]: expected a finite number of seconds, got {late!r}")
    threshold = lateness_threshold(mean_gap_s, floor_s, share)
    judged = quantile(lateness_s, percentile)
    assert judged is not None  # there are values
    return ClientBound(judged, threshold, percentile, judged > threshold)


def think_gap(mean_s: float, kind: str, seed: str | int | None, level: int, session: int, turn: int) -> float:
    """The think/tool time of an agentic session before turn `turn` (seconds): `mean_s` when fixed, else drawn
    from an exponential of that mean, seeded by the run's seed, the level and the session's turn (so two lanes
    wait alike)."""
    if mean_s <= 0:
        return 0.0
    if kind == "fixed":
        return mean_s
    if kind != "exponential":
        raise ValueError(f"think {kind!r}: fixed or exponential")
    return random.Random(f"{seed}/sessions={level}/{session}/{turn}").expovariate(1.0 / mean_s)
