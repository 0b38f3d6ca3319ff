"""Two lanes under load compared level by level, and their capacities under the SLO.

Per load level both lanes ran (c4, 0.5/s), each compared figure (TTFT p50 and p99, TPOT p50, output t/s and,
with an SLO, goodput and attainment) is tested one of two ways, and the row says which: over runs, as every
measure (compare.compare_values: Welch or paired t) when each lane has several runs of the level; within
one run per lane, from the per-request figures the level stored: a percentile by its 95 % order-statistic
interval (the normal approximation of Price and Bonett: se = interval width / (2 · 1.96)), attainment as a
share of the level's requests (two-proportion z test). A rate over the level's span is one figure per run:
with one run per lane it is shown, not tested. Levels one lane lacks are listed; a level that is client-bound
or invalid in any run of either lane is listed with why and given no verdict. The tested rows join the
comparison's one Holm family (family.corrected). A capacity is a range, from the highest level that met the
SLO to the lowest that missed it; two lanes' are compared only under the same SLO, and said higher only when
the ranges do not overlap. docs/compare.md, "Under load".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

from labkit.measures import (
    AXIS,
    CAPACITY,
    LEVEL_AXES,
    LOOP_AXIS,
    AxisValue,
    level_key,
    level_label,
    level_values,
    level_window,
    parse_key,
)
from labkit.report.compare import (
    ALPHA,
    DEFAULT_MARGIN,
    NO_VALUES,
    MeasureComparison,
    Sides,
    compare_values,
    decide,
    no_test,
)
from labkit.report.stats import MIN_INTERVAL_RUNS
from labkit.store import StoredRun

# the figures compared at each level by default, in the order a level's rows show them; goodput and
# attainment exist only with an SLO (docs/measurement.md, "Latency percentiles, SLO and goodput")
LEVEL_MEASURES = (
    "load_ttft@stat=p50",
    "load_ttft@stat=p99",
    "load_tpot@stat=p50",
    "load_output_tps",
    "load_goodput",
    "load_attainment",
)
CAPACITY_FAMILIES = tuple(CAPACITY.values())
CAPACITY_UNITS = {"closed": "streams", "open": "req/s", "sessions": "sessions"}  # a capacity's loop, its unit
Z95 = NormalDist().inv_cdf(1.0 - ALPHA / 2.0)  # 1.96: a 95 % interval is the estimate ± Z95 · se
RUNS, WITHIN = "over runs", "within one run"  # how a level's figure was tested
# what a row says when its figure cannot be tested within one run
ONE_FIGURE = (
    "one figure per run (a rate over the level's span has no interval within a run); more runs would test it"
)
NO_INTERVAL = "too few requests"
NOT_COMPARED = "not compared"


def is_level_measure(name: str) -> bool:
    """Whether `name` is a load figure without its level (load_ttft@stat=p99, load_goodput): what
    `--measure` names to compare at every shared level."""
    found = parse_key(name)
    return (
        found is not None
        and found.family.startswith("load_")
        and found.family not in CAPACITY_FAMILIES
        and all(found.get(axis) is None for axis in LEVEL_AXES)
    )


def short_name(measure: str) -> str:
    """How a level row names its figure: 'TTFT p99', 'TPOT p50', 'output t/s', 'goodput'."""
    family, _, stat = measure.partition("@stat=")
    names = {
        "load_ttft": "TTFT",
        "load_tpot": "TPOT",
        "load_itl": "ITL",
        "load_e2el": "E2E latency",
        "load_output_tps": "output t/s",
        "load_total_tps": "total t/s",
        "load_request_rate": "requests/s",
        "load_goodput": "goodput",
        "load_attainment": "attainment",
    }
    name = names.get(family, family)
    return f"{name} {stat}" if stat else name


# ---- pure statistics ---------------------------------------------------------------------------------------


def _normal_p(diff: float, se: float) -> float:
    """Two-sided p of z = diff / se; an exact difference (se 0) has p 0, or 1 when it is 0."""
    if se == 0.0:
        return 1.0 if diff == 0.0 else 0.0
    return math.erfc(abs(diff / se) / math.sqrt(2.0))


def _normal_tost(diff: float, se: float, bound: float) -> float:
    """The TOST p for |true difference| < bound under the normal approximation (compare.tost_p's rule)."""
    if se == 0.0:
        return 0.0 if abs(diff) < bound else 1.0
    z = NormalDist()
    return max(1.0 - z.cdf((diff + bound) / se), z.cdf((diff - bound) / se))


def _tested(base: Sides, diff: float, se: float, test: str) -> MeasureComparison:
    """A row tested by a normal approximation: its 95 % and 90 % intervals, p, TOST p, decided alone."""
    half, eq_half = Z95 * se, NormalDist().inv_cdf(1.0 - ALPHA) * se
    row = MeasureComparison(
        **base,
        diff=diff,
        lo=diff - half,
        hi=diff + half,
        eq_lo=diff - eq_half,
        eq_hi=diff + eq_half,
        test=test,
        df=None,  # a z test
        p=_normal_p(diff, se),
        tost_p=_normal_tost(diff, se, base["margin"] * abs(base["mean_a"] or 0.0))
        if base["mean_a"]
        else None,
        verdict="",
        why="",
    )
    return decide(row, row.p or 0.0, 1)


def interval_se(lo: float, hi: float) -> float:
    """The standard error of a percentile estimate read off its 95 % order-statistic interval: its width over
    2 · 1.96 (Price and Bonett's estimate for a median, any percentile alike). The stored interval covers the
    percentile with probability at least 95 %, so taking it as exactly 95 % can only overstate the se."""
    return (hi - lo) / (2.0 * Z95)


def compare_percentiles(
    measure: str,
    a: tuple[float, tuple[float, float] | None, int],
    b: tuple[float, tuple[float, float] | None, int],
    margin: float = DEFAULT_MARGIN,
) -> MeasureComparison:
    """One percentile of one level, one run per lane: (estimate, its 95 % order-statistic interval or None,
    request count) per side. The difference B − A with se = √(se_A² + se_B²) (interval_se), a z test and
    TOST; no test when a side has no interval (too few requests for this percentile)."""
    (va, ia, na), (vb, ib, nb) = a, b
    base = Sides(measure=measure, n_a=na, n_b=nb, mean_a=va, mean_b=vb, margin=margin, note="")
    if ia is None or ib is None:
        sides = " and ".join(t for t, i in (("A", ia), ("B", ib)) if i is None)
        why = f"{sides} {'has' if ' and ' not in sides else 'have'} no 95 % interval of this percentile from {na if ia is None else nb} requests"
        return no_test(base, vb - va, NO_INTERVAL, why)
    se = math.hypot(interval_se(*ia), interval_se(*ib))
    return _tested(base, vb - va, se, f"order-statistic intervals, {na} vs {nb} requests")


def compare_shares(
    measure: str, a: tuple[float, int], b: tuple[float, int], margin: float = DEFAULT_MARGIN
) -> MeasureComparison:
    """A share of a level's requests (attainment), one run per lane: (share, requests) per side. The
    two-proportion z test: p from the pooled share, the interval from each side's own binomial variance."""
    (pa, na), (pb, nb) = a, b
    base = Sides(measure=measure, n_a=na, n_b=nb, mean_a=pa, mean_b=pb, margin=margin, note="")
    if not na or not nb:
        return no_test(base, None, NO_VALUES, "a side has no requests at this level")
    pooled = (pa * na + pb * nb) / (na + nb)
    se_pooled = math.sqrt(pooled * (1.0 - pooled) * (1.0 / na + 1.0 / nb))
    se = math.sqrt(pa * (1.0 - pa) / na + pb * (1.0 - pb) / nb)
    row = _tested(base, pb - pa, se, f"two-proportion z, {na} vs {nb} requests")
    p = _normal_p(pb - pa, se_pooled)
    return decide(replace(row, p=p), p, 1)


# ---- capacities --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapacitySide:
    """One lane's capacity under its SLO, over its runs: each run's highest level that met (`values`, None
    when even the lowest missed) and lowest level that missed (`misses`, None when the ladder's top met)."""

    unit: str  # streams or req/s
    slo: str
    values: tuple[float | None, ...]
    misses: tuple[float | None, ...]

    @property
    def lo(self) -> float:
        """The lowest level every run met (0 when a run met none)."""
        return min(0.0 if v is None else v for v in self.values)

    @property
    def hi(self) -> float:
        """The highest level a run missed: the capacity lies below it (inf when a run's ladder never missed)."""
        return (
            math.inf if any(m is None for m in self.misses) else max(m for m in self.misses if m is not None)
        )

    def text(self) -> str:
        """'4 streams (5 missed)', 'at least 8 streams (no level missed)', over runs 'runs: 4, 4, 6 ...'."""
        u = self.unit
        if len(self.values) == 1:
            v, m = self.values[0], self.misses[0]
            met = f"none (even the lowest level, {m:g} {u}, missed)" if v is None else f"{v:g} {u}"
            above = (
                ""
                if v is None
                else (" (no level missed: at least this)" if m is None else f" ({m:g} missed)")
            )
            return met + above
        runs = ", ".join("none" if v is None else f"{v:g}" for v in self.values)
        missed = ", ".join("none" if m is None else f"{m:g}" for m in self.misses)
        return f"runs met {runs} {u} (missed {missed})"

    def range_text(self) -> str:
        hi = "∞" if math.isinf(self.hi) else f"{self.hi:g}"
        return f"[{self.lo:g}, {hi}) {self.unit}"


@dataclass(frozen=True)
class CapacityReading:
    """Both lanes' capacities and how they lie: "B higher", "A higher", "ranges overlap" or NOT_COMPARED."""

    a: CapacitySide | None
    b: CapacitySide | None
    verdict: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        def side(s: CapacitySide | None) -> dict[str, Any] | None:
            if s is None:
                return None
            hi = None if math.isinf(s.hi) else s.hi
            return {
                "unit": s.unit,
                "slo": s.slo,
                "values": s.values,
                "misses": s.misses,
                "lo": s.lo,
                "hi": hi,
            }

        return {"a": side(self.a), "b": side(self.b), "verdict": self.verdict, "why": self.why}


def capacity_reading(a: CapacitySide | None, b: CapacitySide | None) -> CapacityReading:
    """Which lane serves more within the SLO. Each capacity lies in [lo, hi): at or above the level every run
    met, below the level a run missed. Only under the same SLO and in the same unit; B is higher when it met a
    level A missed (B's lo ≥ A's hi), A likewise; else the ranges overlap and neither is shown higher."""
    if a is None or b is None:
        which = "neither lane has" if a is None and b is None else f"only {'A' if b is None else 'B'} has"
        return CapacityReading(a, b, NOT_COMPARED, f'{which} a capacity (a run with profile = "capacity")')
    for tag, s in (("A", a), ("B", b)):
        if s.slo.startswith("different SLOs"):
            return CapacityReading(a, b, NOT_COMPARED, f"{tag}'s runs searched under {s.slo}")
    if a.unit != b.unit:
        why = f"A's capacity is in {a.unit} (its loop), B's in {b.unit}: different kinds of level are not one scale"
        return CapacityReading(a, b, NOT_COMPARED, why)
    if a.slo != b.slo:
        why = f"the lanes searched under different SLOs (A: {a.slo}; B: {b.slo}): a capacity is only as high as its SLO allows"
        return CapacityReading(a, b, NOT_COMPARED, why)
    ra, rb = f"A {a.range_text()}", f"B {b.range_text()}"
    if b.lo >= a.hi:
        return CapacityReading(
            a, b, "B higher", f"B met {b.lo:g} {b.unit}, where A missed {a.hi:g} ({ra}, {rb})"
        )
    if a.lo >= b.hi:
        return CapacityReading(
            a, b, "A higher", f"A met {a.lo:g} {a.unit}, where B missed {b.hi:g} ({ra}, {rb})"
        )
    return CapacityReading(
        a,
        b,
        "ranges overlap",
        f"each capacity lies between the level met and the level missed: {ra}, {rb} overlap, so neither is shown higher",
    )


def capacity_of(docs: Sequence[StoredRun]) -> CapacitySide | None:
    """A lane's capacity from its runs' summary.load["capacity"] entries; None when no run searched."""
    found = [c for d in docs if isinstance(c := _load(d).get("capacity"), Mapping)]
    if not found:
        return None
    units = {CAPACITY_UNITS.get(str(c.get("loop")), "req/s") for c in found}
    slos = {str(c.get("slo")) for c in found}
    slo = (
        slos.pop()
        if len(slos) == 1
        else "different SLOs: " + " | ".join(sorted({str(c.get("slo")) for c in found}))
    )
    unit = units.pop() if len(units) == 1 else "streams and req/s"
    return CapacitySide(
        unit, slo, tuple(_num(c.get("value")) for c in found), tuple(_num(c.get("miss")) for c in found)
    )


def _num(x: object) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


# ---- levels --------------------------------------------------------------------------------------------------

Level = tuple[str, AxisValue]  # (axis, value): ("load", 4), ("rate", 0.5)


@dataclass(frozen=True)
class LevelRow:
    """One figure at one level: the comparison (its verdict decided on the family's Holm p once corrected)
    and how it was tested (RUNS, WITHIN, or "" when not at all)."""

    level: Level
    figure: str  # the level-less form, load_ttft@stat=p99
    row: MeasureComparison
    method: str

    @property
    def name(self) -> str:
        return f"{level_label(*self.level)} {short_name(self.figure)}"


@dataclass(frozen=True)
class LevelNote:
    """A level left out: one lane lacks it, or a run of either lane flags it (client-bound, invalid)."""

    level: Level
    why: str

    @property
    def label(self) -> str:
        return level_label(*self.level)


@dataclass
class LoadComparison:
    """The load part of a comparison: the tested figures per shared level, the levels left out and why,
    and the capacities."""

    rows: list[LevelRow] = field(default_factory=list)
    only: list[LevelNote] = field(default_factory=list)
    flagged: list[LevelNote] = field(default_factory=list)
    capacity: CapacityReading | None = None

    @property
    def methods(self) -> list[str]:
        return sorted({r.method for r in self.rows if r.method})

    def to_dict(self) -> dict[str, Any]:
        return {
            "levels": [
                {"level": level_label(*r.level), "figure": r.figure, "method": r.method, **r.row.to_dict()}
                for r in self.rows
            ],
            "not_compared": [{"level": n.label, "why": n.why} for n in self.only],
            "flagged": [{"level": n.label, "why": n.why} for n in self.flagged],
            "capacity": self.capacity.to_dict() if self.capacity else None,
        }


def _load(doc: StoredRun) -> Mapping[str, Any]:
    load = doc.summary.raw.get("load")
    return load if isinstance(load, Mapping) else {}


def levels_of(docs: Sequence[StoredRun]) -> set[Level]:
    """Every level a lane's runs ran: their summary.load entries and their measure keys (an invalid level's
    figures are moved out of the measures, its entry stays)."""
    out: set[Level] = set()
    for d in docs:
        out |= {(axis, AXIS[axis].normal(v)) for axis, v in level_values(d.summary.measures)}
        for window, entry in _load(d).items():
            if window != "capacity" and isinstance(entry, Mapping) and "level" in entry:
                axis = LOOP_AXIS.get(str(entry.get("loop")), "rate")
                out.add((axis, AXIS[axis].normal(entry["level"])))
    return out


def level_flags(doc: StoredRun, level: Level) -> list[str]:
    """Why one run's level may not be judged: client-bound (its sends came late), or invalid (too many failed
    requests, or output sanity's verdict)."""
    window = level_window("load", *level)
    entry = _load(doc).get(window)
    sanity = doc.summary.raw.get("sanity")
    checked = sanity.get(window) if isinstance(sanity, Mapping) else None
    out = []
    if isinstance(entry, Mapping) and entry.get("client_bound"):
        out.append("client-bound (its sends came late: the level ran below its rate)")
    if isinstance(entry, Mapping) and entry.get("invalid"):
        out.append(f"invalid ({entry.get('why', 'too many failed requests')})")
    elif isinstance(checked, Mapping) and checked.get("invalid"):
        out.append("invalid (failed or looping responses; output sanity left its figures out)")
    return out


def _order(level: Level) -> tuple[int, float]:
    return LEVEL_AXES.index(level[0]), float(level[1])


def _value(doc: StoredRun, key: str) -> float | None:
    v = doc.summary.measures.get(key)
    return None if v is None or math.isnan(v) else float(v)


def compare_levels(
    a: Sequence[StoredRun],
    b: Sequence[StoredRun],
    figures: Sequence[str] = LEVEL_MEASURES,
    *,
    margin: float = DEFAULT_MARGIN,
    seeds: Sequence[str] | None = None,
) -> LoadComparison | None:
    """Both lanes' load levels compared (each row decided alone: family.corrected decides them together with
    the comparison's other measures). `seeds`: the shared prompt seeds when the runs pair, else None. None
    when neither lane has a load level."""
    la, lb = levels_of(a), levels_of(b)
    if not la and not lb:
        return None
    out = LoadComparison(capacity=capacity_reading(capacity_of(a), capacity_of(b)))
    if not figures:  # the capacities alone (--measure load_capacity_streams)
        return out
    for level in sorted(la ^ lb, key=_order):
        out.only.append(LevelNote(level, f"only {'A' if level in la else 'B'} ran it"))
    for level in sorted(la & lb, key=_order):
        why = [
            f"{tag} run {d.run_id}: {w}"
            for tag, docs in (("A", a), ("B", b))
            for d in docs
            for w in level_flags(d, level)
        ]
        if why:
            out.flagged.append(LevelNote(level, "; ".join(why)))
            continue
        for figure in figures:
            key = level_key(figure, *level)
            row = _compare_one(key, a, b, level, margin, seeds)
            if row is not None:
                out.rows.append(LevelRow(level, figure, row[0], row[1]))
    return out


def _compare_one(
    key: str,
    a: Sequence[StoredRun],
    b: Sequence[StoredRun],
    level: Level,
    margin: float,
    seeds: Sequence[str] | None,
) -> tuple[MeasureComparison, str] | None:
    """One figure at one level, or None when a lane has no value of it (goodput without an SLO)."""
    ha = [d for d in a if _value(d, key) is not None]
    hb = [d for d in b if _value(d, key) is not None]
    if not ha or not hb:
        return None
    if len(ha) == 1 and len(hb) == 1:
        return _within(key, ha[0], hb[0], level, margin)
    if seeds is not None and len(ha) == len(a) and len(hb) == len(b):
        by_a = {d.provenance.prompt_seed: d for d in a}
        by_b = {d.provenance.prompt_seed: d for d in b}
        va = [_value(by_a[s], key) for s in seeds]
        vb = [_value(by_b[s], key) for s in seeds]
        return compare_values(key, va, vb, pairs=True, margin=margin), RUNS
    row = compare_values(key, [_value(d, key) for d in ha], [_value(d, key) for d in hb], margin=margin)
    return row, RUNS if min(len(ha), len(hb)) >= MIN_INTERVAL_RUNS else ""


def _within(
    key: str, da: StoredRun, db: StoredRun, level: Level, margin: float
) -> tuple[MeasureComparison, str]:
    """One run per lane: a percentile by its stored interval, attainment by its request counts; a rate over
    the span is shown untested."""
    window = level_window("load", *level)
    ea, eb = _load(da).get(window) or {}, _load(db).get(window) or {}
    va, vb = _value(da, key), _value(db, key)
    assert va is not None and vb is not None
    found = parse_key(key)
    if found is not None and found.get("stat") is not None:
        ia, ib = _interval(ea, key), _interval(eb, key)
        na, nb = int(ea.get("answered") or 0), int(eb.get("answered") or 0)
        return compare_percentiles(key, (va, ia, na), (vb, ib, nb), margin), WITHIN
    if found is not None and found.family == "load_attainment" and ea.get("requests") and eb.get("requests"):
        return compare_shares(key, (va, int(ea["requests"])), (vb, int(eb["requests"])), margin), WITHIN
    base = Sides(measure=key, n_a=1, n_b=1, mean_a=va, mean_b=vb, margin=margin, note="")
    return no_test(base, vb - va, "one run each", ONE_FIGURE), ""


def _interval(entry: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    stored = (entry.get("intervals") or {}).get(key)
    if isinstance(stored, Sequence) and len(stored) == 2 and all(_num(x) is not None for x in stored):
        return float(stored[0]), float(stored[1])
    return None
