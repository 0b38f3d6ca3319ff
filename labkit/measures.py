"""The measure catalogue and the measure keys: every key a run summary holds, with its title, unit, direction,
definition and whether it is a headline measure, so the plan, the summary text, the tables, the plots and
`labkit compare` read one list instead of keeping their own (docs/measurement.md, "The measure catalogue").

A key is a family (a catalogue row's pattern, "decode_c<N>_agg") plus named axes (`MeasureKey`); this module
is the only one that writes a key string or reads one back, so a new axis or a decimal value changes one place.
Pure data and lookups, at the base of the tree: recipe, measure and report all import it. The shipped rows are
measures.toml's; a workload defined outside labkit registers its own in ADDED_ROWS, which every lookup reads.
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Literal

Direction = Literal["higher", "lower", "none"]
# The prompt content categories, in display order: one file of the pinned corpus each (labkit/measure/prompt/corpus/),
# the names `measure.content` takes, and the `@<category>` suffix of their measures (docs/measurement.md,
# "Prompt content"). A key without a suffix is measured on the default content, fresh synthetic prose.
CONTENT = ("prose", "code", "structured", "chat")
CONTENT_MARK = "@"
# the header a content prompt's text starts with, "[<nonce> <category>] ": labkit/measure/prompt/corpus.py writes it,
# the simulator reads the category from it (labkit/sim/speculation.py)
CONTENT_HEADER = re.compile(r"\[([0-9a-f]+) ([a-z]+)\] ")
# how a context-depth request finds its context: computed afresh (uncached), or sent before (cached)
CacheState = Literal["uncached", "cached"]
CACHE_STATES: tuple[CacheState, ...] = ("uncached", "cached")
RATE = "t/s"
SPEED_UNITS = (RATE, "s")  # a rate or a time: its better side is the faster one

AxisValue = int | float | str
_COUNT = r"0|[1-9][0-9]*"  # no leading zeros, so one number has one spelling
_DECIMAL = r"(?:0|[1-9][0-9]*)(?:\.[0-9]*[1-9])?"  # no trailing zeros either: 0.5, 30, never 30.0
_STATISTIC = r"mean|min|max|std|p(?:[1-9][0-9]?(?:\.[0-9]*[1-9])?|0\.[0-9]*[1-9])"  # p0.1, p50, p99.9


@dataclass(frozen=True)
class Axis:
    """One named axis of a measure key. A placeholder axis is written where a row's pattern holds its
    placeholder ("<N>" in "decode_c<N>_agg"); a qualifier (no placeholder) follows any key as
    `@<name>=<value>`, so rate, load and statistic need no new row per family. `syntax` is the regex of a
    value's text; a choice has `words`, each written as its `texts` (default: the word); `shown` is how a
    title writes the value."""

    name: str
    placeholder: str
    syntax: str
    words: tuple[str, ...] = ()
    texts: tuple[str, ...] = ()
    shown: str = "{}"
    thousands: bool = False

    def pattern(self) -> str:
        return "(" + ("|".join(re.escape(t) for t in self.texts or self.words) or self.syntax) + ")"

    def value(self, text: str) -> AxisValue:
        """The value a key's text of this axis stands for (the text already matched `pattern`)."""
        if self.words:
            return self.words[(self.texts or self.words).index(text)]
        return text if self.syntax == _STATISTIC else float(text) if "." in text else int(text)

    def normal(self, value: object) -> AxisValue:
        """The value as a key holds it (an integral decimal as an int, so 30.0 and 30 are one key); ValueError
        for a value this axis cannot take (a fraction of a count, a negative, NaN, a word not among `words`)."""
        if value in self.words or (self.syntax == _STATISTIC and re.fullmatch(_STATISTIC, str(value))):
            return str(value)
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if (
            self.syntax in (_COUNT, _DECIMAL)
            and isinstance(value, int | float)
            and number
            and 0 <= value < math.inf
        ):
            if float(value).is_integer():
                return int(value)
            if self.syntax == _DECIMAL:
                return float(value)
        raise ValueError(f"{self.name} cannot be {value!r}")

    def text_of(self, value: AxisValue) -> str:
        """How a key writes a (normal) value of this axis: 0.5 or 0.00001, never 1e-05."""
        if self.words:
            return (self.texts or self.words)[self.words.index(str(value))]
        return format(Decimal(repr(value)), "f") if isinstance(value, float) else str(value)

    def title_of(self, value: AxisValue) -> str:
        return self.shown.format(f"{value:,}" if self.thousands and isinstance(value, int) else str(value))


# Every axis a key may have, placeholders in the order a pattern may hold them, then the qualifiers in the
# order a key writes them: decode_c1@code@rate=0.5@load=4@sessions=2@stat=p90 (docs/measurement.md, "Measure keys").
AXES: tuple[Axis, ...] = (
    Axis("concurrency", "<N>", _COUNT),
    Axis("prompt", "<P>", _COUNT, thousands=True),
    Axis("position", "<i>", _COUNT),
    Axis("content", "<C>", "", CONTENT),
    Axis("turn", "<T>", _COUNT),
    Axis("idle", "<S>", _DECIMAL),
    Axis("depth", "<D>", _COUNT, thousands=True),
    Axis("cache", "<K>", "", CACHE_STATES, ("", "_cached")),
    Axis("rate", "", _DECIMAL, shown="at {} requests/s"),
    Axis("load", "", _DECIMAL, shown="load {}"),
    Axis("sessions", "", _COUNT, shown="{} sessions"),
    Axis("stat", "", _STATISTIC),
)
AXIS = {a.name: a for a in AXES}
QUALIFIERS = tuple(a.name for a in AXES if not a.placeholder)
QUALIFIER_MARK, QUALIFIER_SET = CONTENT_MARK, "="
PLACEHOLDER = re.compile("|".join(re.escape(a.placeholder) for a in AXES if a.placeholder))
_BY_PLACEHOLDER = {a.placeholder: a for a in AXES if a.placeholder}
_QUALIFIED = "".join(
    f"(?:{re.escape(QUALIFIER_MARK + name + QUALIFIER_SET)}{AXIS[name].pattern()})?" for name in QUALIFIERS
)


@dataclass(frozen=True)
class Measure:
    """One catalogue row (labkit/measures.toml). `key` is a summary key or a pattern of them, the family of the
    keys it matches ("decode_c<N>_agg"); `title` may use the same placeholders; `direction` says which way is
    better ("none": neither); `definition` what the figure is; `headline`: a lane is judged by it."""

    key: str
    title: str
    unit: str
    direction: Direction
    definition: str
    headline: bool = False

    @property
    def speed(self) -> bool:
        """Whether better means faster (a token rate or a time), so a comparison says faster or slower."""
        return self.direction != "none" and self.unit in SPEED_UNITS

    @property
    def axes(self) -> tuple[str, ...]:
        """The names of the axes its pattern holds, in the order it holds them."""
        return tuple(_BY_PLACEHOLDER[p].name for p in PLACEHOLDER.findall(self.key))

    def regex(self) -> re.Pattern[str]:
        """The keys of this row: its pattern's placeholders filled, then any qualifiers."""
        body = PLACEHOLDER.sub(lambda p: _BY_PLACEHOLDER[p.group(0)].pattern(), re.escape(self.key))
        return re.compile(body + _QUALIFIED)


# the shipped rows, in display order: decode, prefill, TTFT, acceptance, content, sessions, idle turns,
# depths, caches, KV pool, NFS, node telemetry, the canary (measures.toml says what each field holds)
CATALOGUE_FILE = Path(__file__).with_name("measures.toml")
CATALOGUE = tuple(Measure(**row) for row in tomllib.loads(CATALOGUE_FILE.read_text("utf-8"))["measure"])
# Rows beyond the shipped ones, by the name of the workload that fills them: an explicit registry, as WORKLOADS
# is, so a workload defined outside labkit (a test's) brings its rows without editing measures.toml
# (monkeypatch.setitem). Every lookup reads it, after the shipped rows, so a registered row never shadows one.
ADDED_ROWS: dict[str, tuple[Measure, ...]] = {}


@dataclass(frozen=True)
class _Rows:
    """The catalogue at one content of ADDED_ROWS: its rows in order, by family, and each pattern compiled."""

    rows: tuple[Measure, ...]
    families: Mapping[str, Measure]
    patterns: tuple[tuple[Measure, re.Pattern[str]], ...]


def _added() -> tuple[Measure, ...]:
    return tuple(row for rows in ADDED_ROWS.values() for row in rows)


@lru_cache(maxsize=16)
def _rows(added: tuple[Measure, ...]) -> _Rows:
    """Built once per content of the registry (the cache is keyed by the added rows themselves, so a change to
    the registry is never answered from an older catalogue); ValueError when two rows share a family."""
    rows = CATALOGUE + added
    families = {row.key: row for row in rows}
    if len(families) < len(rows):
        twice = sorted({r.key for r in rows if sum(s.key == r.key for s in rows) > 1})
        raise ValueError(f"catalogue rows registered twice: {', '.join(twice)}")
    return _Rows(rows, families, tuple((row, row.regex()) for row in rows))


def catalogue() -> tuple[Measure, ...]:
    """Every row: the shipped ones (CATALOGUE), then those of ADDED_ROWS in the order they were registered."""
    return _rows(_added()).rows


def families() -> Mapping[str, Measure]:
    """Every row by its family (its pattern)."""
    return _rows(_added()).families


@dataclass(frozen=True)
class MeasureKey:
    """A measure key as a value: its family (a catalogue row's pattern) and its named axes, in the order a key
    writes them. `str()` is the key a summary holds, `parse_key` reads one back; ValueError for a family the
    catalogue does not know, a missing or foreign axis, or a value its axis cannot take."""

    family: str
    axes: tuple[tuple[str, AxisValue], ...] = ()

    def __post_init__(self) -> None:
        row = families().get(self.family)
        if row is None:
            raise ValueError(f"{self.family!r} is no measure family of the catalogue")
        given = dict(self.axes)
        missing = [a for a in row.axes if a not in given]
        foreign = [a for a in given if a not in row.axes and a not in QUALIFIERS]
        if missing or foreign:
            raise ValueError(f"{self.family}: missing axes {missing}, foreign axes {foreign}")
        order = [*row.axes, *QUALIFIERS]
        normal = tuple((a, AXIS[a].normal(given[a])) for a in order if a in given)
        object.__setattr__(self, "axes", normal)

    @property
    def row(self) -> Measure:
        return families()[self.family]

    def get(self, axis: str) -> AxisValue | None:
        """The value of one axis, None when the key has none."""
        return dict(self.axes).get(axis)

    @property
    def qualified(self) -> bool:
        """Whether a qualifier (rate, load, statistic) sets it beside its family's own figure."""
        return any(name in QUALIFIERS for name, _ in self.axes)

    def __str__(self) -> str:
        values = dict(self.axes)
        text = PLACEHOLDER.sub(lambda p: _axis_text(p, values), self.family)
        for n in (n for n in QUALIFIERS if n in values):
            text += f"{QUALIFIER_MARK}{n}{QUALIFIER_SET}{AXIS[n].text_of(values[n])}"
        return text


def _axis_text(placeholder: re.Match[str], values: Mapping[str, AxisValue], shown: bool = False) -> str:
    axis = _BY_PLACEHOLDER[placeholder.group(0)]
    value = values[axis.name]
    return axis.title_of(value) if shown else axis.text_of(value)


def _match(key: str) -> tuple[int, MeasureKey] | None:
    """The place in the catalogue of the row a key matches, and the key parsed; every lookup comes here."""
    return _match_in(key, _added())


@lru_cache(maxsize=8192)
def _match_in(key: str, added: tuple[Measure, ...]) -> tuple[int, MeasureKey] | None:
    for i, (row, pattern) in enumerate(_rows(added).patterns):
        if hit := pattern.fullmatch(key):
            names = [*row.axes, *QUALIFIERS]
            axes = [(n, AXIS[n].value(t)) for n, t in zip(names, hit.groups(), strict=True) if t is not None]
            return i, MeasureKey(row.key, tuple(axes))
    return None


def parse_key(key: str) -> MeasureKey | None:
    """The family and axes of a summary key; None for a key the catalogue does not know (an imported
    figure, a typo, a count with a leading zero)."""
    found = _match(key)
    return found[1] if found else None


def measure_key(family: str, **axes: AxisValue) -> str:
    """The key of a family at these axes: measure_key("decode_c<N>_span", concurrency=2) is decode_c2_span."""
    return str(MeasureKey(family, tuple(axes.items())))


def axis_values(keys: Iterable[str], families: str | Iterable[str], axis: str) -> list[AxisValue]:
    """The values of one axis among the keys of these families, each once, in order (c2 before c16, content
    categories in CONTENT order); keys with a qualifier are left out, as figures beside the family's own."""
    wanted = {families} if isinstance(families, str) else set(families)
    parsed = [p for p in map(parse_key, keys) if p is not None and p.family in wanted and not p.qualified]
    return sorted({v for p in parsed if (v := p.get(axis)) is not None}, key=lambda v: _rank(axis, v))


def measure_info(key: str) -> Measure | None:
    """The catalogue row a summary key matches, None for a key the catalogue does not know."""
    found = _match(key)
    return found[1].row if found else None


def direction(key: str) -> Direction:
    """Which way is better for this key; "none" for a key without one or not in the catalogue."""
    return getattr(measure_info(key), "direction", "none")


def is_headline(key: str, rates_only: bool = False) -> bool:
    """A headline measure (a lane is judged by it); `rates_only`: only the token-rate ones (decode c1, the
    cK aggregates, prefill), the figures a plan repeats for and a sweep plot shows. A key with a qualifier
    (a percentile, a rate) is a figure beside its headline, not one."""
    found = parse_key(key)
    return (
        found is not None
        and not found.qualified
        and found.row.headline
        and (found.row.unit == RATE or not rates_only)
    )


def headline(keys: Iterable[str], rates_only: bool = False) -> list[str]:
    """The headline measures among `keys`, in the order given."""
    return [k for k in keys if is_headline(k, rates_only)]


def order_key(key: str) -> tuple[int, tuple[float, ...], str]:
    """Catalogue order, then the key's axis values (c2 before c16, prefill_4096 before prefill_12600, a content
    category in CONTENT order, uncached before cached); unknown keys last."""
    found = _match(key)
    if not found:
        return len(catalogue()), (), key
    i, parsed = found
    return i, tuple(_rank(name, value) for name, value in parsed.axes), key


def _rank(axis: str, value: AxisValue) -> float:
    if isinstance(value, str):  # a choice by its place among the words, a percentile by its number
        words = AXIS[axis].words
        return float(words.index(value)) if value in words else float(value[1:] if value[0] == "p" else 0)
    return float(value)


def title(key: str) -> str:
    """The catalogue title with the key's axes filled in ("decode c2 aggregate", "prefill 4,096-token prompt",
    qualifiers after it: "TTFT c1, p90"); the key itself when the catalogue does not know it."""
    found = parse_key(key)
    if found is None:
        return key
    values = dict(found.axes)
    text = PLACEHOLDER.sub(lambda p: _axis_text(p, values, shown=True), found.row.title)
    return ", ".join([text, *(AXIS[n].title_of(values[n]) for n in QUALIFIERS if n in values)])


def unit(key: str) -> str:
    """The key's unit ("t/s", "s", "J/tok", ...); "" when the catalogue does not know it."""
    return getattr(measure_info(key), "unit", "")


def label(key: str) -> str:
    """Title and unit, as a plot axis names a measure: "decode c2 aggregate (t/s)"; unknown keys as they are."""
    row = measure_info(key)
    return f"{title(key)} ({row.unit})" if row else key


def decode_key(concurrency: int) -> str:
    """The headline decode key at a concurrency: decode_c1 per request, decode_c<N>_agg for N streams."""
    return (
        measure_key("decode_c<N>_agg", concurrency=concurrency)
        if concurrency > 1
        else measure_key("decode_c1")
    )


def prefill_key(prompt_tokens: int, measure: str = "") -> str:
    """The prefill key at a prompt length: prefill_4096 (the headline), with `measure` prefill_4096_ttft."""
    return measure_key("prefill_<P>" + (f"_{measure}" if measure else ""), prompt=prompt_tokens)


def prefill_tokens(key: str) -> int | None:
    """The prompt length of a headline prefill key (prefill_key's inverse), None for any other key."""
    found = parse_key(key)
    tokens = found.get("prompt") if found and found.family == "prefill_<P>" and not found.qualified else None
    return tokens if isinstance(tokens, int) else None


def depth_key(measure: str, depth: int, state: CacheState | None = None) -> str:
    """The key of a measure at a context depth in a cache state: depth_8192_ttft, depth_8192_ttft_cached; a
    figure of the depth itself (ttft_gain) takes no state."""
    if state is None:
        return measure_key(f"depth_<D>_{measure}", depth=depth)
    return measure_key(f"depth_<D>_{measure}<K>", depth=depth, cache=state)


def level_key(measure: str, axis: str, value: AxisValue) -> str:
    """A load measure at one level: level_key("load_ttft@stat=p99", "load", 4) is load_ttft@load=4@stat=p99;
    `measure` is a family, with a statistic when it has one, `axis` the level's qualifier (load or rate)."""
    family, _, stat = measure.partition(f"{QUALIFIER_MARK}stat{QUALIFIER_SET}")
    axes: dict[str, AxisValue] = {axis: value}
    if stat:
        axes["stat"] = stat
    return measure_key(family, **axes)


# a load level's qualifier: closed-loop streams, then open-loop rates, then agentic sessions at once
LEVEL_AXES = ("load", "rate", "sessions")
# the qualifier of each kind of load level (a record's load_loop)
LOOP_AXIS: dict[str, str] = {"closed": "load", "open": "rate", "sessions": "sessions"}
# the capacity under the SLO of each kind of load level, its catalogue family ("Capacity under the SLO")
CAPACITY: dict[str, str] = {
    "closed": "load_capacity_streams",
    "open": "load_capacity_rate",
    "sessions": "load_capacity_sessions",
}


def level_values(keys: Iterable[str], measure: str = "") -> list[tuple[str, AxisValue]]:
    """The load levels (axis, value) among the keys, closed-loop streams by count, then rates; with `measure`
    (a family with its statistic, load_ttft@stat=p99) only the levels at which the keys hold it."""
    found = set()
    for key in keys:
        parsed = parse_key(key)
        for axis in LEVEL_AXES:
            value = parsed.get(axis) if parsed is not None else None
            if value is not None and (not measure or level_key(measure, axis, value) == key):
                found.add((axis, value))
    return sorted(found, key=lambda p: (LEVEL_AXES.index(p[0]), float(p[1])))


def level_label(axis: str, value: AxisValue) -> str:
    """How a table row names a load level: c4 (4 closed-loop streams), 0.5/s (an open loop's rate), s8 (8
    agentic sessions at once)."""
    text = AXIS[axis].text_of(value)
    return f"c{text}" if axis == "load" else f"s{text}" if axis == "sessions" else f"{text}/s"


def turn_key(measure: str, turn: int) -> str:
    """agentic_ttft_t2: a measure of session turn 2."""
    return measure_key(f"agentic_{measure}_t<T>", turn=turn)


def idle_key(measure: str, seconds: float) -> str:
    """idle_60_ttft: a measure of the idle turn after 60 s (its window idle_60 prefixes it, as prefill_<P>'s)."""
    return measure_key(f"idle_<S>_{measure}", idle=seconds)


def content_key(base: str, category: str) -> str:
    """The key of a measure taken on one content category: decode_c1 on code prompts is decode_c1@code."""
    return measure_key(f"{base}{CONTENT_MARK}<C>", content=category)


def split_content(key: str) -> tuple[str, str | None]:
    """(the measure, its content category) of a key: ("decode_c1", "code") for decode_c1@code, (key, None)
    for a key measured on the default content or not ending in a known category (windows too: decode@code)."""
    base, mark, category = key.rpartition(CONTENT_MARK)
    return (base, category) if mark and base and category in CONTENT else (key, None)


# what a measured window covers beyond its own key and <window>_*: the whole decode phase's window also its
# acceptance and its TTFTs, the warm c1 window its TTFT but not the cold turn's figures
_WINDOW_ALSO = {"decode": ("accept_", "ttft_c"), "decode_c1": ("ttft_c1",)}
_WINDOW_NOT = {"decode_c1": ("decode_c1_cold",)}


def level_window(workload: str, axis: str, value: AxisValue) -> str:
    """The window of one level of a workload whose keys carry the level as a qualifier: load@load=4 (4 streams),
    load@rate=0.5 (0.5 requests/s); it covers the workload's keys of that level (window_covers)."""
    if axis not in QUALIFIERS:
        raise ValueError(f"{axis!r} is no qualifier axis ({', '.join(QUALIFIERS)})")
    return f"{workload}{QUALIFIER_MARK}{axis}{QUALIFIER_SET}{AXIS[axis].text_of(AXIS[axis].normal(value))}"


def _level_of(window: str) -> tuple[str, str, AxisValue] | None:
    """(workload, axis, value) of a level_window name, None for any other window."""
    base, mark, rest = window.partition(QUALIFIER_MARK)
    name, eq, text = rest.partition(QUALIFIER_SET)
    if not (mark and eq and name in QUALIFIERS and re.fullmatch(AXIS[name].pattern(), text)):
        return None
    return base, name, AXIS[name].value(text)


def window_covers(window: str, key: str) -> bool:
    """Whether a summary measure is made of a measured window's requests, for the flags of the evidence
    (decode, prefill_4096, decode@code) and of output sanity (decode_c1, decode_c1_cold, decode_c2, ...) alike
    (docs/measurement.md, "Output sanity"): the content categories must match, so decode@code covers the code
    figures only and decode none of a category's; prefill_4096 covers prefill_4096_* but not prefill_40960; a
    level's window (load@load=4) the keys of its workload at that level only."""
    level = _level_of(window)
    if level is not None:
        found = parse_key(key)
        base, axis, value = level
        return found is not None and found.family.startswith(base + "_") and found.get(axis) == value
    window, window_content = split_content(window)
    key, key_content = split_content(key)
    if window_content != key_content or key.startswith(_WINDOW_NOT.get(window, ())):
        return False
    return key == window or key.startswith((f"{window}_", *_WINDOW_ALSO.get(window, ())))


def docs_table() -> str:
    """The shipped catalogue as docs/measurement.md's table (tools/measures_doc.py writes it, tests check it),
    never a registered row of ADDED_ROWS; a placeholder as code, so Markdown does not read it as a tag."""
    lines = ["| key | title | unit | direction | headline | definition |", "|---|---|---|---|---|---|"]
    for r in CATALOGUE:
        texts = [
            PLACEHOLDER.sub(lambda p: f"`{p.group(0)}`", t).replace("|", "\\|")
            for t in (r.title, r.definition)
        ]
        lines.append(
            f"| `{r.key}` | {texts[0]} | {r.unit} | {r.direction} | {'yes' if r.headline else ''} | {texts[1]} |"
        )
    return "\n".join(lines)


def content_header(nonce: str, category: str) -> str:
    """The header of a content prompt: the nonce and the category, before the prompt as written."""
    return f"[{nonce} {category}] "


def header_content(text: object) -> str | None:
    """The category a prompt's header names; None for any other text (the default content)."""
    found = CONTENT_HEADER.match(text) if isinstance(text, str) else None
    return found.group(2) if found and found.group(2) in CONTENT else None
