"""A run's load levels as measures: per level, the percentiles of TTFT, ITL, TPOT and E2EL, the token and
request rates, the concurrencies, the failed share, the SLO's attainment and goodput, and an open loop's send
lateness, each keyed with the level as a qualifier (docs/measurement.md, "Serving under load").

Why the requests of every repetition are pooled: a percentile is a figure of a distribution, and the p99 of
40 requests is one value of 40, so more requests make it truer; the interval beside it (`summary.load`) is the
order-statistic one of the pooled requests. A level whose failed share passes `max_error_share` is invalid
(output sanity then leaves its figures out); one whose sends came late by more than the lateness threshold is
flagged client-bound, since its requests were not sent at the rate it names. Each level counts its failures by
kind (request/client.py's `failure_kind`: HTTP 5xx, connection refused or reset, cut, timeout, other); a level the
engine died in (`failed_levels`, which the workload fills when the engine stops answering) is marked failed and
invalid, and its figures are left out, since its requests stopped partway.

Pure: records and plans in, the summary's measures, methods, `load` entries and flags out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.request.arrivals import client_bound
from labkit.measure.request.client import FAILURE_KINDS, failure_kind
from labkit.measure.summary.capacity import capacity
from labkit.measure.summary.latency import (
    LEVEL_PERCENTILES,
    SLO,
    LevelStats,
    Percentiles,
    level_meets,
    level_stats,
    percentile,
    quantile_interval,
    request_e2el,
    request_tpot,
    request_ttft,
    slo_bounds,
)
from labkit.measures import CAPACITY, LOOP_AXIS, level_label, level_window, measure_key
from labkit.recipe import LoadPlan, SloPlan

CLIENT_BOUND = "client-bound"  # the flag code of a level whose sends came late
LATENESS_STATS = (50.0, 99.0)  # the lateness percentiles a level keeps


CLIFF_SHARE = (
    0.9  # a session level whose turns find less of their expected prefix-cache hits is past the cliff
)
EVICTION = "eviction"  # the `summary.load` entry of the eviction onset, beside the levels' and "capacity"
CAPACITY_UNIT = {
    "closed": "streams",
    "open": "requests/s",
    "sessions": "sessions",
}  # a capacity's unit by loop


def level_axis(loop: str) -> str:
    """The key axis of a loop's levels: `load` (closed-loop streams), `rate` (open-loop requests/s) or
    `sessions` (agentic sessions at once)."""
    return LOOP_AXIS[loop]


def load_window(loop: str, level: float) -> str:
    """The window (and `summary.load` entry) of one level: load@load=4, load@rate=0.5, load@sessions=8."""
    return level_window("load", level_axis(loop), _level_value(loop, level))


def _level_value(loop: str, level: float) -> int | float:
    return float(level) if loop == "open" else int(level)


def slo_of(plan: SloPlan | None) -> SLO | None:
    """The latency statistics' SLO for a recipe's [measure.slo], None without one."""
    if plan is None:
        return None
    return SLO(plan.ttft_s, plan.tpot_s, plan.e2e_s, plan.percentile)


def stat_text(p: float) -> str:
    """A percentile as the statistic axis writes it: 99.0 -> p99, 99.9 -> p99.9."""
    return f"p{p:g}"


def pass_meets(recs: Sequence[RequestRecord], slo: SLO, max_error_share: float) -> bool:
    """Whether one pass of a level met the SLO: every given bound at its percentile (latency.level_meets), and
    no more failed requests than the plan tolerates (a level that sheds requests has not served them)."""
    failed = sum(1 for r in recs if not r.ok)
    return bool(recs) and failed <= max_error_share * len(recs) and level_meets(recs, slo)


def load_measures(
    s: RunSummary,
    records: Sequence[RequestRecord],
    plan: LoadPlan,
    slo_plan: SloPlan | None,
    level_gauges: Mapping[str, Sequence[Sequence[float]]] | None = None,
    failed_levels: Mapping[str, str] | None = None,
) -> None:
    """Every level's measures, `summary.load` entry and flags, in the order the levels first ran (a sweep's and
    a capacity search's levels are chosen during the run), then the capacity the passes say when the plan
    searched for it. `level_gauges`: the engine's gauges sampled while each level ran (RunLog.level_gauges);
    `failed_levels`: {window: why} of a level the engine died in (RunLog.failed_levels): its entry is marked
    failed and it gets no measures, and a search it ended states no capacity."""
    failed_levels = failed_levels or {}
    slo = slo_of(slo_plan)
    load = [r for r in records if r.phase == "load" and r.load_level is not None]
    levels = dict.fromkeys(
        (r.load_loop, r.load_level) for r in load if r.load_level is not None and r.load_loop
    )
    for loop, level in levels:
        recs = [r for r in load if r.load_loop == loop and r.load_level == level]
        axis, value = level_axis(loop), _level_value(loop, level)
        window = load_window(loop, level)
        stats = level_stats(recs, slo)
        entry = _entry(loop, value, recs, stats)
        if window in failed_levels:
            s.load[window] = mark_failed(entry, failed_levels[window])
            continue
        _put(s, axis, value, stats, len(recs))
        _intervals(entry, axis, value, recs)
        if loop == "open":
            _lateness(s, entry, plan, axis, value, level, recs, window)
        if loop == "sessions":
            _session_level(s, entry, axis, value, recs)
        if slo is not None:
            entry["slo_met"] = stats.slo_met
        _server_side(s, entry, axis, value, recs, (level_gauges or {}).get(window, ()))
        share = entry["failed"] / len(recs)
        if share > plan.max_error_share:
            entry["invalid"] = True
            entry["why"] = (
                f"{entry['failed']} of {len(recs)} requests failed ({share:.1%}), over measure.load."
                f"max_error_share ({plan.max_error_share:.1%})"
            )
        s.load[window] = entry
    if plan.profile == "capacity" and slo is not None:
        if failed_levels:
            s.notes.append(
                "load capacity: none stated, the engine died during the search "
                f"({', '.join(failed_levels)}), so the levels above the last one measured were never tried"
            )
        else:
            _capacity(s, plan, slo, load)
    if any(loop == "sessions" for loop, _ in levels):
        _eviction(s)


def failure_counts(recs: Sequence[RequestRecord]) -> dict[str, int]:
    """A level's failed requests by kind (request/client.py's `failure_kind`), every kind present."""
    counts = dict.fromkeys(FAILURE_KINDS, 0)
    for r in recs:
        if not r.ok:
            counts[failure_kind(r.error) or "other"] += 1
    return counts


def mark_failed(entry: dict[str, Any], why: str) -> dict[str, Any]:
    """A level's `summary.load` entry marked as the level the engine died in: failed with the reason, and
    invalid for it (whatever its failed share), since its requests stopped partway."""
    return {**entry, "level_failed": why, "invalid": True, "why": f"the engine died during the level: {why}"}


def _capacity(s: RunSummary, plan: LoadPlan, slo: SLO, load: Sequence[RequestRecord]) -> None:
    """The capacity the search's passes say (summary/capacity.py), as a measure and a `summary.load` entry;
    each repetition's passes are judged apart and the lowest capacity kept, a note saying so."""
    found = []
    for rep in sorted({r.rep for r in load}):
        passes: dict[tuple[float, int], list[RequestRecord]] = {}
        for r in load:
            if r.rep == rep and r.load_level is not None and r.load_loop == plan.loop:
                passes.setdefault((r.load_level, r.load_pass), []).append(r)
        results = [(lvl, pass_meets(recs, slo, plan.max_error_share)) for (lvl, _), recs in passes.items()]
        found.append(capacity(results))
    cap = min(found, key=lambda c: -1.0 if c.value is None else c.value)
    family, unit = CAPACITY[plan.loop], CAPACITY_UNIT[plan.loop]
    bounds = ", ".join(f"{name.upper()} p{slo.percentile:g} <= {b:g} s" for name, b, _ in slo_bounds(slo))
    entry: dict[str, Any] = {
        "loop": plan.loop,
        "value": cap.value,
        "miss": cap.miss,
        "passes": cap.passes,
        "miss_met": cap.miss_met,
        "miss_passes": cap.miss_passes,
        "slo": bounds,
        "repetitions": [c.value for c in found],
    }
    s.load["capacity"] = entry
    if cap.value is None:
        s.notes.append(
            f"load capacity: even the lowest level ({cap.miss:g} {unit}) missed the SLO ({bounds})"
        )
        return
    s.measures[family] = cap.value
    above = (
        f"{cap.miss:g} missed ({cap.miss_met} of {cap.miss_passes} passes met)"
        if cap.miss is not None
        else "no level missed: the capacity is at least this (the ladder ended)"
    )
    s.method[family] = f"highest level within {bounds}, met in {cap.passes} of {cap.passes} passes; {above}"


def _entry(loop: str, level: float, recs: Sequence[RequestRecord], st: LevelStats) -> dict[str, Any]:
    return {
        "loop": loop,
        "level": level,
        "requests": len(recs),
        "answered": st.n_ok,
        "failed": st.n_failed,
        "failures": failure_counts(recs),
        "span_s": st.span_s,
        "intervals": {},
    }


def _put(s: RunSummary, axis: str, value: int | float, st: LevelStats, n: int) -> None:
    """The level's figures as keys, each with how it was obtained."""
    where = {axis: value}
    for family, p, what in (
        ("load_ttft", st.ttft, "send to the first token-bearing chunk"),
        ("load_itl", st.itl, "gaps between token-bearing chunks, pooled"),
        ("load_tpot", st.tpot, "(E2E - TTFT) / (N - 1) per request"),
        ("load_e2el", st.e2el, "send to the stream's end ([DONE])"),
    ):
        for q, v in zip(LEVEL_PERCENTILES, _values(p), strict=True):
            if v is None:
                continue
            key = measure_key(family, **where, stat=stat_text(q))
            s.measures[key] = v
            s.method[key] = f"{stat_text(q)} (linear) of {p.n} values: {what}; client perf_counter stamps"
    span = "per second of the level's span (first send to last end)"
    for family, v, how in (
        ("load_output_tps", st.output_tps, f"answered requests' output tokens {span}"),
        ("load_total_tps", st.total_tps, f"answered requests' prompt + output tokens {span}"),
        ("load_request_rate", st.request_rate, f"answered requests {span}"),
        ("load_concurrency", st.effective_concurrency, "Σ request send-to-end / span"),
        ("load_peak_concurrency", float(st.peak_concurrency), "most requests in flight at once"),
        ("load_errors", st.n_failed / n, f"failed, cut or timed out of {n} requests"),
        ("load_attainment", st.attainment, "requests within every SLO bound / all requests"),
        ("load_goodput", st.goodput, f"requests within every SLO bound {span}"),
    ):
        if v is None:
            continue
        key = measure_key(family, **where)
        s.measures[key] = v
        s.method[key] = how


def _server_side(
    s: RunSummary,
    entry: dict[str, Any],
    axis: str,
    value: int | float,
    recs: Sequence[RequestRecord],
    samples: Sequence[Sequence[float]],
) -> None:
    """What the engine says of the level: its mean queue time and preemptions over the level's window (the
    window's counter deltas, on every record of it), the per-request queue time where the engine returns its
    own metrics, and the gauges sampled while it ran, with their peaks."""
    view = next((r.server_window for r in recs if r.server_window), None) or {}
    where = {axis: value}
    if "queue_s" in view:
        key = measure_key("load_queue", **where)
        s.measures[key] = view["queue_s"]
        s.method[key] = "the engine's request_queue_time histogram: its mean over the level's window"
    if "preemptions" in view:
        key = measure_key("load_preemptions", **where)
        s.measures[key] = view["preemptions"]
        s.method[key] = "the engine's num_preemptions counter: its delta over the level's window"
    queues = [
        q / 1000
        for r in recs
        if r.engine_metrics and isinstance(q := r.engine_metrics.get("queue_time_ms"), int | float)
    ]
    if queues:
        entry["engine_queue_p99_s"] = percentile(queues, 99.0)
    if samples:
        entry["gauges"] = [list(x) for x in samples]
        for i, name in ((1, "running"), (2, "waiting"), (3, "kv_usage")):
            seen = [x[i] for x in samples if not math.isnan(x[i])]
            if seen:
                entry[f"peak_{name}"] = max(seen)


def _session_level(
    s: RunSummary, entry: dict[str, Any], axis: str, value: int | float, recs: Sequence[RequestRecord]
) -> None:
    """A session level's prefix-cache hits against the expected, and each turn's TTFT at its depth: the
    engine's hits are the level window's counter delta when the engine has the counters, else the responses'
    cached_tokens summed; the expected are the turns' least (the previous prompt, whole blocks)."""
    ok = [r for r in recs if r.ok]
    expected = sum(r.hit_expected for r in ok if r.hit_expected is not None)
    window = next((r.hit_window for r in recs if r.hit_window is not None), None)
    per_request = [r.hit_engine for r in recs if r.hit_engine is not None]
    engine, source = (
        (window, "the level window's prefix-cache counter delta")
        if window is not None
        else (sum(per_request), "the responses' cached_tokens, summed")
        if per_request and len(per_request) == len(recs)
        else (None, "")
    )
    if expected > 0 and engine is not None:
        share = engine / expected
        key = measure_key("load_hit_share", **{axis: value})
        s.measures[key] = share
        s.method[key] = f"{source} / the turns' expected hits (the previous prompt in whole blocks)"
        entry["hits"] = {
            "engine": engine,
            "expected": expected,
            "expected_max": sum(r.hit_expected_max for r in ok if r.hit_expected_max is not None),
            "share": share,
            "source": source,
        }
    turns = []
    for turn in sorted({r.turn for r in ok}):
        at = [r for r in ok if r.turn == turn]
        ttfts = [v for v in map(request_ttft, at) if v is not None]
        depths = [r.prompt_tokens for r in at if r.prompt_tokens is not None]
        hits = [r.hit_engine for r in at if r.hit_engine is not None]
        row = {
            "turn": turn,
            "sessions": len(at),
            "depth": percentile(depths, 50.0) if depths else None,
            "ttft_p50": percentile(ttfts, 50.0) if ttfts else None,
            "ttft_p99": percentile(ttfts, 99.0) if ttfts else None,
            "hits": sum(hits) if hits and len(hits) == len(at) else None,
            "expected": sum(r.hit_expected for r in at if r.hit_expected is not None) if turn > 1 else None,
        }
        turns.append(row)
        if row["ttft_p50"] is not None:
            key = measure_key("load_turn_ttft_t<T>", turn=turn, **{axis: value})
            s.measures[key] = row["ttft_p50"]
            s.method[key] = (
                f"median of {len(ttfts)} sessions' turn-{turn} TTFT, at a median depth of {row['depth']:g} tokens"
            )
    entry["turns"] = turns


def _eviction(s: RunSummary) -> None:
    """The eviction cliff: the fewest sessions whose turns found less than CLIFF_SHARE of their expected
    prefix-cache hits, with the highest level below it that held; none when every level held."""
    levels = sorted(
        (e["level"], e["hits"]["share"])
        for w, e in s.load.items()
        if w not in ("capacity", EVICTION) and e.get("loop") == "sessions" and "hits" in e
    )
    if not levels:
        return
    held: tuple[float, float] | None = None
    for level, share in levels:
        if share < CLIFF_SHARE:
            s.measures["load_eviction_sessions"] = level
            s.method["load_eviction_sessions"] = (
                f"fewest sessions whose prefix-cache hits fell below {CLIFF_SHARE:.0%} of the expected "
                f"({share:.1%})" + ("" if held is None else f"; {held[0]:g} sessions found {held[1]:.1%}")
            )
            s.load[EVICTION] = {"onset": level, "share": share, "held": held, "threshold": CLIFF_SHARE}
            return
        held = (level, share)
    s.load[EVICTION] = {"onset": None, "share": None, "held": held, "threshold": CLIFF_SHARE}


def _values(p: Percentiles) -> tuple[float | None, ...]:
    return p.p50, p.p90, p.p95, p.p99


def _intervals(entry: dict[str, Any], axis: str, value: int | float, recs: Sequence[RequestRecord]) -> None:
    """Each per-request percentile's 95 % order-statistic interval (None with too few requests); the ITL
    gaps are left out, as they are not independent within a request."""
    ok = [r for r in recs if r.ok]
    for family, figure in (
        ("load_ttft", request_ttft),
        ("load_tpot", request_tpot),
        ("load_e2el", request_e2el),
    ):
        values = [v for v in map(figure, ok) if v is not None]
        for q in LEVEL_PERCENTILES:
            iv = quantile_interval(values, q)
            key = measure_key(family, **{axis: value}, stat=stat_text(q))
            entry["intervals"][key] = None if iv is None else [iv.lo, iv.hi]


def _lateness(
    s: RunSummary,
    entry: dict[str, Any],
    plan: LoadPlan,
    axis: str,
    value: int | float,
    rate: float,
    recs: Sequence[RequestRecord],
    window: str,
) -> None:
    """An open level's send lateness percentiles, and its client-bound verdict and flag."""
    late = [r.lateness_s for r in recs if r.lateness_s is not None]
    if not late:
        return
    for q in LATENESS_STATS:
        key = measure_key("load_lateness", **{axis: value}, stat=stat_text(q))
        s.measures[key] = percentile(late, q)
        s.method[key] = f"{stat_text(q)} of {len(late)} sends: t_send (request hook) - intended send time"
    verdict = client_bound(
        late, 1.0 / rate, floor_s=plan.lateness_floor_ms / 1000.0, share=plan.lateness_share
    )
    entry["lateness_threshold_s"] = verdict.threshold_s
    entry["client_bound"] = verdict.bound
    if verdict.bound:
        p99, threshold = verdict.late_s, verdict.threshold_s
        s.flags.append(
            {
                "code": CLIENT_BOUND,
                "window": window,
                "message": (
                    f"{window}: sends came late, lateness p99 {p99 * 1000:.1f} ms over the {threshold * 1000:.1f} "
                    "ms threshold: the client did not keep the schedule, so the level ran slower than its rate"
                ),
            }
        )


def load_rows(s: RunSummary) -> list[tuple[str, str, str]]:
    """The terminal summary's rows of the load levels, in the order they ran: the level, its TTFT p50 and p99,
    then ITL p99, TPOT p50, output and request rates, the SLO's goodput and attainment, failures and flags;
    then the capacity when the run searched for it."""
    out = []
    for window, entry in s.load.items():
        if window in ("capacity", EVICTION):
            continue
        loop = entry["loop"]
        axis, value = level_axis(loop), _level_value(loop, entry["level"])
        get = partial(_figure, s, axis, value)

        ttft50, ttft99 = get("load_ttft", "p50"), get("load_ttft", "p99")
        value_text = "—" if ttft50 is None else f"TTFT p50 {_ms(ttft50)}, p99 {_ms(ttft99)}"
        bits = [f"{entry['answered']} answered"]
        for label, v, fmt in (
            ("ITL p99", get("load_itl", "p99"), _ms),
            ("TPOT p50", get("load_tpot", "p50"), _ms),
            ("output", get("load_output_tps"), lambda x: f"{x:,.0f} t/s"),
            ("", get("load_request_rate"), lambda x: f"{x:.2f} req/s"),
            ("goodput", get("load_goodput"), lambda x: f"{x:.2f} req/s"),
            ("attainment", get("load_attainment"), lambda x: f"{x:.1%}"),
        ):
            if v is not None:
                bits.append(f"{label} {fmt(v)}".strip())
        if entry["failed"]:
            bits.append(f"{entry['failed']} failed{_kinds_text(entry)}")
        if entry.get("client_bound"):
            bits.append("CLIENT-BOUND: sends came late")
        if entry.get("level_failed"):
            bits.append("FAILED: the engine died during the level, which ended the run")
        elif entry.get("invalid"):
            bits.append(f"INVALID: {entry['why']}")
        hits = entry.get("hits")
        if hits and hits.get("share") is not None:
            bits.append(f"prefix hits {hits['share']:.0%} of expected")
        name = f"load {level_label(axis, value)}"
        out.append((name, value_text, ", ".join(bits)))
    cap = s.load.get("capacity")
    if cap:
        unit = {"closed": "streams", "open": "req/s", "sessions": "sessions"}[cap["loop"]]
        shown = "none" if cap["value"] is None else f"{cap['value']:g} {unit}"
        above = "the ladder's top met it" if cap["miss"] is None else f"{cap['miss']:g} missed"
        out.append(("capacity under the SLO", shown, f"{cap['slo']}; {above}"))
    ev = s.load.get(EVICTION)
    if ev:
        held = "" if ev["held"] is None else f"{ev['held'][0]:g} sessions found {ev['held'][1]:.0%}"
        if ev["onset"] is None:
            out.append(("prefix-cache eviction", "none seen", held or "no session level measured its hits"))
        else:
            below = f"{ev['onset']:g} sessions found {ev['share']:.0%} of expected hits"
            out.append(
                (
                    "prefix-cache eviction",
                    f"from {ev['onset']:g} sessions",
                    "; ".join(filter(None, (below, held))),
                )
            )
    return out


def _kinds_text(entry: Mapping[str, Any]) -> str:
    """A level's failures by kind, as the terminal row shows them: " (2 reset, 1 http_5xx)"; a level stored
    before the kinds were counted has only its cuts."""
    kinds = entry.get("failures") or {"cut": entry.get("cut", 0)}
    shown = [f"{n} {kind}" for kind, n in kinds.items() if n]
    return f" ({', '.join(shown)})" if shown else ""


def _figure(s: RunSummary, axis: str, value: int | float, family: str, stat: str = "") -> float | None:
    """One level's figure of a family (at a statistic), None when the summary has none."""
    return s.measures.get(measure_key(family, **{axis: value}, **({"stat": stat} if stat else {})))


def _ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1e3:,.1f} ms"
