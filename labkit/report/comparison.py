"""Two lanes (or run sets) of stored runs compared measure by measure, behind the comparability gate.

Selection: `RECIPE`, `RECIPE/VARIANT_ID`, `RECIPE@axis=name,...` or comma-separated run ids, read from the
loaded results. Per measure, the run values of each side go to labkit.report.compare; runs that carry only
recorded ranges (lab-note figures) get a range statement instead of a test. docs/compare.md, "Selecting
runs" and "Recorded ranges". The default measures are the catalogue's headline ones (docs/measurement.md,
"The measure catalogue"); per prompt content category both sides measured, content_compare.py says whether
acceptance explains the decode difference (docs/compare.md, "By prompt content"); runs with load levels are
compared level by level and by capacity (load_compare.py; docs/compare.md, "Under load"), their figures in
the same Holm family as the measures.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from labkit.errors import LabkitError
from labkit.measures import headline, level_values
from labkit.recipe import find_recipe, load_recipe, suggest
from labkit.report.compare import (
    DEFAULT_MARGIN,
    REGRESSIONS,
    MeasureComparison,
    compare_values,
    direction,
    verdict_words,
)
from labkit.report.content_compare import ContentReading, readings
from labkit.report.family import corrected, correction_text
from labkit.report.gate import Gate, about_rows, axis_keys, gate, key_prefix
from labkit.report.load_compare import (
    CAPACITY_FAMILIES,
    LEVEL_MEASURES,
    LoadComparison,
    compare_levels,
    is_level_measure,
)
from labkit.report.stats import boot_of, unit_of
from labkit.store import StoredRun, measure_rows


class CompareError(LabkitError):
    """A selection that names no runs, or a comparison the gate blocks."""


@dataclass(frozen=True)
class Side:
    """One side of a comparison: how it was asked for, its complete runs and their unit."""

    selector: str
    title: str
    docs: tuple[StoredRun, ...]
    unit: str
    left_out: str = ""  # the lane's runs of the other source, not used (recorded figures or measured runs)

    @property
    def run_ids(self) -> list[str]:
        return [d.run_id for d in self.docs]


@dataclass(frozen=True)
class RangeRow:
    """A measure where a side has recorded ranges only: min–max per side and how they lie, never a test."""

    measure: str
    a: tuple[float, float] | None
    b: tuple[float, float] | None
    relation: str


@dataclass
class Comparison:
    a: Side
    b: Side
    gate: Gate
    forced: bool
    margin: float
    rows: list[MeasureComparison] = field(default_factory=list)
    ranges: list[RangeRow] = field(default_factory=list)
    paired: bool = False
    pairing: str = ""
    correction: str = ""
    content: list[ContentReading] = field(default_factory=list)  # by prompt content: content_compare.py
    load: LoadComparison | None = None  # level by level and the capacities: load_compare.py

    @property
    def tested(self) -> list[MeasureComparison]:
        """Every row of the comparison: its measures, then its load levels' figures (one Holm family)."""
        return self.rows + ([r.row for r in self.load.rows] if self.load else [])

    def regressions(self, pct: float) -> list[MeasureComparison]:
        """Measures (and load levels' figures) where B is significantly slower (or worse: energy) than A by
        more than `pct` percent, significant after the correction across everything compared (the verdicts
        are decided on it)."""
        return [
            r
            for r in self.tested
            if r.verdict in REGRESSIONS and r.rel is not None and abs(r.rel) * 100 > pct
        ]

    def to_dict(self) -> dict[str, Any]:
        def side(s: Side) -> dict[str, Any]:
            return {
                "selector": s.selector,
                "title": s.title,
                "runs": s.run_ids,
                "unit": s.unit,
                "left_out": s.left_out,
            }

        return {
            "a": side(self.a),
            "b": side(self.b),
            "gate": self.gate.to_dict(),
            "forced": self.forced,
            "margin": self.margin,
            "pairing": self.pairing,
            "correction": self.correction,
            "measures": [r.to_dict() for r in self.rows],
            "recorded_ranges": [
                {"measure": r.measure, "a": r.a, "b": r.b, "relation": r.relation} for r in self.ranges
            ],
            "by_content": [r.to_dict() for r in self.content],
            "load": self.load.to_dict() if self.load else None,
        }


def _complete(data: Any) -> dict[str, StoredRun]:
    ok = set(data.runs[data.runs["status"] == "complete"]["run"]) if len(data.runs) else set()
    return {rid: doc for rid, doc in data.docs.items() if rid in ok}


def _recipe_name(name: str, present: set[str]) -> str:
    if name in present:
        return name
    try:  # an alias ("prod", "default") names the recipe folder the runs are stored under
        return load_recipe(find_recipe(name)).name
    except LabkitError:
        raise CompareError(
            f"no stored runs of recipe {name!r}{suggest(name, present)}; have: {', '.join(sorted(present))}"
        )


def select(data: Any, selector: str, recorded: bool = False) -> Side:
    """The complete runs a selector names; CompareError naming what exists when it names none or several lanes.
    A lane's recorded figures and its measured runs are never mixed: its measured runs, unless `recorded` asks
    for the recorded figures or it has no measured runs (run ids named one by one are taken as named)."""
    docs = _complete(data)
    present = {d.recipe for d in docs.values()}
    if "/" not in selector and "@" not in selector and all(p in docs for p in selector.split(",")):
        picked = [docs[r] for r in selector.split(",")]
        return _side(selector, picked, "runs " + selector)
    if "/" not in selector and "@" not in selector and re.match(r"^\d{8}T", selector):
        missing = [r for r in selector.split(",") if r not in docs]
        raise CompareError(f"no complete run {missing[0]!r}{suggest(missing[0], docs)}")
    recipe, _, rest = selector.partition("@") if "@" in selector else selector.partition("/")
    recipe = _recipe_name(recipe, present)
    picked = [d for d in docs.values() if d.recipe == recipe]
    if "@" in selector:
        want = dict(kv.split("=", 1) for kv in rest.split(",") if "=" in kv)
        picked = [d for d in picked if all(d.variants.get(k) == v for k, v in want.items())]
        # a sweep point's axis is not the recipe's: the point is named only by a selector that names it
        picked = [d for d in picked if set(swept_axes(d)) <= set(want)]
    elif rest:
        picked = [d for d in picked if d.variant_id == rest]
    picked, left_out = _by_source(picked, recorded)
    variants = sorted({d.variant_id for d in picked})
    if not picked:
        have = sorted({d.variant_id for d in docs.values() if d.recipe == recipe})
        raise CompareError(
            f"{selector!r}: no complete runs; {recipe} has variants: {', '.join(have) or 'none'}"
        )
    if len(variants) > 1:
        raise CompareError(
            f"{selector!r} names runs of {len(variants)} lanes; pick one: "
            + ", ".join(f"{recipe}/{v}" for v in variants)
        )
    return _side(selector, picked, f"{recipe}/{variants[0]}", left_out)


def _by_source(picked: list[StoredRun], recorded: bool) -> tuple[list[StoredRun], str]:
    """The runs of one source among a lane's, and what was left out: a recorded figure is a note's median or
    range, not a run value, so it never stands in a sample beside measured runs (the recorded run may also sit
    under an older variant id, from before the recipe gained an axis)."""
    rec = [d for d in picked if d.source == "recorded"]
    measured = [d for d in picked if d.source != "recorded"]
    if not rec or not measured:
        return picked, ""
    if recorded:
        return rec, f"{len(measured)} measured run{'s' if len(measured) != 1 else ''} left out (--recorded)"
    return (
        measured,
        f"{len(rec)} recorded figure set{'s' if len(rec) != 1 else ''} left out (--recorded uses them)",
    )


def _side(selector: str, picked: Sequence[StoredRun], title: str, left_out: str = "") -> Side:
    picked = sorted(picked, key=lambda d: d.run_id)
    label = picked[-1].label
    boots = {d.run_id: boot_of(d) for d in picked}
    unit = unit_of([d.run_id for d in picked], boots)
    if all(d.source == "recorded" for d in picked):
        unit = "recorded figures"
    return Side(selector, f"{title} ({label})" if label else title, tuple(picked), unit, left_out)


def _expected_keys(a: Side, b: Side) -> list[str] | None:
    """Recipe key prefixes set by the variant axes on which the two sides differ (same recipe only)."""
    ra, rb = {d.recipe for d in a.docs}, {d.recipe for d in b.docs}
    if len(ra | rb) != 1:
        return None
    name = next(iter(ra))
    if not name:  # a run folder without a recipe name
        return None
    try:
        rec = load_recipe(find_recipe(name))
    except LabkitError:
        return None
    va, vb = a.docs[0].variants, b.docs[0].variants
    overlays = {}
    for axis in sorted(set(va) | set(vb)):
        for side, choice in (("a", va.get(axis)), ("b", vb.get(axis))):
            if va.get(axis) != vb.get(axis) and choice in rec.data["variants"].get(axis, {}):
                overlays[f"{axis}/{choice}/{side}"] = rec.data["variants"][axis][choice]
    return axis_keys(overlays) + swept_keys(a.docs + b.docs, va, vb)


def swept_axes(doc: StoredRun) -> Mapping[str, tuple[str, ...]]:
    """{short name: key path} of the sweep a run belongs to (provenance.sweep.axes), {} for a plain lane."""
    return doc.provenance.sweep_axes


def swept_keys(docs: Sequence[StoredRun], va: Mapping[str, Any], vb: Mapping[str, Any]) -> list[str]:
    """The recipe keys of sweep axes (provenance.sweep.axes, {short name: key path}) on which the sides
    differ: a sweep point's axis is not in the recipe file (docs/sweeps.md, "Points")."""
    keys = set()
    for doc in docs:
        for short, key in swept_axes(doc).items():
            if va.get(short) != vb.get(short):
                keys.add(key_prefix(key))
    return sorted(keys)


def _values(side: Side) -> dict[str, list[tuple[float, float, float]]]:
    """{measure: [(value, min, max) per run]} from the stored runs; an imported run's figure that speaks of
    a labkit measure stands in for it, converted (the gate has then named its definition: docs/imports.md)."""
    out: dict[str, list[tuple[float, float, float]]] = {}
    for doc in side.docs:
        for row in measure_rows(doc):
            out.setdefault(row["measure"], []).append((row["value"], row["min"], row["max"]))
        for key, value in stand_ins(doc).items():
            out.setdefault(key, []).append((value, value, value))
    return out


def stand_ins(doc: StoredRun) -> dict[str, float]:
    """{labkit measure: converted figure} of an imported run's figures not already under the labkit key."""
    have = doc.summary.measures
    return {
        m: row.converted
        for m, (_, row) in about_rows(doc).items()
        if m not in have and row.converted is not None
    }


def _pairing(a: Side, b: Side) -> tuple[bool, str, list[str]]:
    """Paired when every run on both sides names its prompt seed, neither side ran a seed twice (a pair is
    one run of each side) and the two sides ran the same seeds; else Welch, naming each of these that failed."""
    why, seeds = [], {}
    for tag, side in (("A", a), ("B", b)):
        found = [d.provenance.prompt_seed for d in side.docs]
        seeds[tag] = [str(x) for x in found if x is not None]
        if len(seeds[tag]) < len(found):
            some = f"{len(found) - len(seeds[tag])} of {len(found)}" if seeds[tag] else f"all {len(found)}"
            why.append(f"{some} runs of {tag} used no shared prompt seed")
        twice = sorted({x for x in seeds[tag] if seeds[tag].count(x) > 1})
        if twice:
            why.append(
                f"{tag} ran prompt seed{'s' if len(twice) > 1 else ''} {', '.join(twice)} more than once, so its runs cannot be paired one to one"
            )
    only = [(t, sorted(set(seeds[t]) - set(seeds[o]))) for t, o in (("A", "B"), ("B", "A"))]
    if not why and any(x for _, x in only):
        shown = "; ".join(f"only {t}: {', '.join(x[:4])}{' ...' if len(x) > 4 else ''}" for t, x in only if x)
        why.append(f"the two sides ran different prompt seeds ({shown})")
    if why:
        return False, "Welch (independent runs): " + "; ".join(why), []
    return True, f"paired on {len(seeds['A'])} shared prompt seeds", sorted(seeds["A"])


def _range_of(vals: Sequence[tuple[float, float, float]]) -> tuple[float, float] | None:
    lo = [x for _, x, _ in vals if not math.isnan(x)]
    hi = [x for _, _, x in vals if not math.isnan(x)]
    return (min(lo), max(hi)) if lo and hi else None


def _relation(measure: str, a: tuple[float, float] | None, b: tuple[float, float] | None) -> str:
    if a is None or b is None:
        return "one side has no figure"
    if b[0] > a[1] or b[1] < a[0]:
        above, way = b[0] > a[1], direction(measure)
        good, bad = verdict_words(measure)
        word = f" ({good if above == (way == 'higher') else bad})" if way != "none" else ""
        return f"B's range lies entirely {'above' if above else 'below'} A's{word}; no test: no run values behind a recorded range"
    return "the ranges overlap; no test: no run values behind a recorded range"


def compare_sides(
    a: Side,
    b: Side,
    *,
    measures: Sequence[str] | None = None,
    margin: float = DEFAULT_MARGIN,
    force: bool = False,
) -> Comparison:
    """The comparison of B against A. CompareError when the gate blocks and `force` is not given, naming
    each blocking fact with both sides' values."""
    g = gate(a.docs, b.docs, _expected_keys(a, b))
    if g.blocked and not force:
        why = "; ".join(i.line() for i in g.items if i.blocking)
        raise CompareError(f"not comparable: {why}. Pass --force (force=True) to compare anyway")
    out = Comparison(a, b, g, forced=bool(g.blocked), margin=margin)
    va, vb = _values(a), _values(b)
    known = sorted(set(va) | set(vb))
    if measures:
        names = [m for m in measures if not is_level_measure(m) and m not in CAPACITY_FAMILIES]
        figures = [m for m in measures if is_level_measure(m)]
        under_load = bool(figures) or any(m in CAPACITY_FAMILIES for m in measures)
    else:
        names = sorted(headline(set(va) & set(vb)), key=_order)
        figures, under_load = list(LEVEL_MEASURES), True
    for m in names:
        if m not in va and m not in vb:
            raise CompareError(f"measure {m!r} is in neither side's runs{suggest(m, known)}")
    for m in figures if measures else ():
        if not level_values(known, m):
            raise CompareError(f"measure {m!r} is at no load level of either side's runs{suggest(m, known)}")
    out.paired, out.pairing, seeds = _pairing(a, b)
    for m in names:
        xa, xb = va.get(m, []), vb.get(m, [])
        values_a: Sequence[float | None] = [v for v, _, _ in xa if not math.isnan(v)]
        values_b: Sequence[float | None] = [v for v, _, _ in xb if not math.isnan(v)]
        if len(values_a) < len(xa) or len(values_b) < len(xb) or not values_a or not values_b:
            ra, rb = _range_of(xa), _range_of(xb)
            out.ranges.append(RangeRow(m, ra, rb, _relation(m, ra, rb)))
            continue
        if out.paired:
            values_a, values_b = _by_seed(a, m, seeds), _by_seed(b, m, seeds)
        out.rows.append(compare_values(m, values_a, values_b, pairs=out.paired, margin=margin))
    if under_load:
        out.load = compare_levels(a.docs, b.docs, figures, margin=margin, seeds=seeds if out.paired else None)
    fixed = corrected(out.tested)  # the measures and the levels' figures: one family
    if out.load:
        done = fixed[len(out.rows) :]
        out.load.rows = [replace(lr, row=r) for lr, r in zip(out.load.rows, done, strict=True)]
    out.rows = fixed[: len(out.rows)]
    out.correction = correction_text(fixed, sum(1 for r in fixed[len(out.rows) :] if r.p is not None))
    docs_a, docs_b = (_in_seed_order(a, seeds), _in_seed_order(b, seeds)) if out.paired else (a.docs, b.docs)
    out.content = readings(out.rows, docs_a, docs_b, paired=out.paired, margin=margin)
    return out


def _in_seed_order(side: Side, seeds: Sequence[str]) -> list[StoredRun]:
    by = {d.provenance.prompt_seed: d for d in side.docs}
    return [by[seed] for seed in seeds]


def _order(measure: str) -> tuple[int | str, ...]:
    """decode before prefill, numbers in numeric order (prefill_4096 before prefill_12600)."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", measure))


def _by_seed(side: Side, measure: str, seeds: Sequence[str]) -> list[float | None]:
    by = {d.provenance.prompt_seed: d for d in side.docs}
    return [by[seed].summary.measures.get(measure) for seed in seeds]
