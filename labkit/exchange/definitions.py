"""The definition table: one row per tool and field an import reads, saying what the figure is, where the tool
defines it, which labkit measure it is about and whether it converts to it exactly. The rows live in
definitions.toml beside this module; docs/imports.md carries the same table, rendered by `docs_table` (a
test keeps the two the same).

A figure keeps its own name (`<format>:<field>`) and unit. `about` names the labkit measure it speaks of at
the result's setting (decode_c<N>, ttft_c<N>, prefill_<P>, ...); `convert` gives it in that measure's unit
(`x` as it is, `x/1000` ms to s, `1000/x` ms per token to tokens per second); `exact` says the tool's
definition is labkit's, so the converted figure may stand under the labkit key itself.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from labkit.errors import LabkitError
from labkit.exchange.model import Setting
from labkit.measure import LEVEL_PERCENTILES
from labkit.measures import families, measure_key

TABLE_FILE = Path(__file__).with_name("definitions.toml")
STD = "_std"
PERCENTILE = "<Q>"  # in a field name: any percentile the tool writes (p99, p99.9)
STATISTIC = "<S>"  # in a field name: mean, median, std or any percentile (mean_ttft_ms, p90_ttft_ms)
CONVERSIONS: dict[str, Callable[[float], float]] = {
    "x": lambda x: x,
    "x/1000": lambda x: x / 1000.0,
    "1000/x": lambda x: 1000.0 / x,
}
KEY_SEP = ":"
# the load families whose keys carry a statistic (@stat=p50 ... p99); the others (load_output_tps, ...) none
LOAD_STAT_FAMILIES = frozenset({"load_ttft", "load_tpot", "load_itl", "load_e2el"})
LOAD_STATS = frozenset(f"p{q:g}" for q in LEVEL_PERCENTILES)  # the percentiles a labkit level keeps
# the statistic a field names: vLLM/SGLang's prefix (median_ttft_ms, p99_ttft_ms), guidellm/aiperf's suffix (.p99)
FIELD_STAT = re.compile(r"(?:^|[._])(median|mean|avg|std|std_dev|p\d+(?:\.\d+)?)(?=$|[._])")


def level_of(setting: Setting) -> tuple[str, int | float] | None:
    """The labkit load level a result ran at, as (key axis, value): ("rate", R) when paced at a finite rate,
    ("load", N) when N streams were kept busy (a concurrency and no finite rate); None otherwise (all at once
    with no cap, a depth, a context-loading request), since labkit's load workload has no such level."""
    if setting.phase or setting.depth:
        return None
    if setting.rate not in (None, "inf"):
        return "rate", float(setting.rate)
    if setting.concurrency:
        return "load", setting.concurrency
    return None


def stat_of_field(field: str) -> str | None:
    """The statistic a field names, as labkit's stat axis writes it (median -> p50), else its own word."""
    found = FIELD_STAT.findall(field)
    if not found:
        return None
    return "p50" if found[-1] == "median" else found[-1]


@dataclass(frozen=True)
class Definition:
    """One row: `format` and `field` name the figure; `text` says what it is, `cite` where the tool says so."""

    format: str
    field: str
    unit: str
    text: str
    cite: str
    about: str = ""  # a labkit measure pattern: decode_c<N>, ttft_c<N>, prefill_<P>, decode_c<N>_span, ...
    convert: str = "x"
    exact: bool = False
    when: str = (
        ""  # a condition on the setting for `about` to hold: "c1" (concurrency 1 only), "c2+" (above 1)
    )
    std: bool = False  # the tool also gives the values' population standard deviation: <field>_std
    stats: tuple[str, ...] = ()  # statistics the tool gives of this metric, each a field <field>.<stat>
    about_stat: str = ""  # which of them speaks of `about` (the others speak of no labkit measure)
    # the load family the figure speaks of at the result's load level (load_ttft, load_output_tps, ...), its
    # conversion into that family's unit and how the tool's figure differs from labkit's (docs/imports.md)
    load: str = ""
    load_convert: str = "x"
    load_differs: str = ""

    def key_of(self, field: str) -> str:
        """A figure's own name in a stored run's summary (`field` fills a <Q> row: p99_ttft_ms)."""
        return f"{self.format}{KEY_SEP}{field}"

    def labkit_key(self, setting: Setting) -> str | None:
        """The labkit measure this figure speaks of at `setting`, None when it speaks of none there."""
        c = setting.concurrency
        if not self.about or (self.when == "c1" and c != 1) or (self.when == "c2+" and (c or 0) < 2):
            return None
        axes = families()[self.about].axes  # the catalogue family it names (a test keeps every row's one)
        if setting.phase or (setting.depth and "depth" not in axes):
            return None  # a context-loading request, or a figure at a depth the measure does not name
        if setting.rate not in (None, "inf"):
            return None  # paced by a rate: its concurrency is a cap, not labkit's fixed c<N>
        configured = None if setting.counted else setting.prompt_tokens  # a counted mean is no prefill length
        values = {"concurrency": setting.concurrency, "prompt": configured, "depth": setting.depth}
        given = {axis: value for axis in axes if (value := values.get(axis)) is not None}
        return measure_key(self.about, **given) if len(given) == len(axes) else None

    def load_key(self, field: str, setting: Setting) -> str | None:
        """The labkit load measure this figure (`field`, for its statistic) speaks of at the result's level:
        load_ttft@rate=2@stat=p99 for p99_ttft_ms at 2 requests/s; None where it speaks of none (a mean or a
        percentile labkit does not keep, no level)."""
        level = level_of(setting) if self.load else None
        if level is None:
            return None
        axis, value = level
        stat = stat_of_field(field)
        if self.load in LOAD_STAT_FAMILIES:
            if stat not in LOAD_STATS:
                return None
            return measure_key(self.load, **{axis: value}, stat=stat)
        if stat not in (None, "mean", "avg"):  # a rate's only statistic is the run's own
            return None
        return measure_key(self.load, **{axis: value})

    def load_converted(self, value: float) -> float:
        """The figure in its load measure's unit."""
        return CONVERSIONS[self.load_convert](value)

    def converted(self, value: float) -> float | None:
        """The figure in the labkit measure's unit; None where it has no value there (1000/0)."""
        if self.convert == "1000/x" and value == 0:
            return None
        return CONVERSIONS[self.convert](value)


@cache
def definitions() -> dict[str, Definition]:
    """{figure key: Definition} for every row of definitions.toml."""
    with open(TABLE_FILE, "rb") as f:
        rows = tomllib.load(f).get("field", [])
    out: dict[str, Definition] = {}
    for i, row in enumerate(rows):
        try:
            d = Definition(**{**row, "stats": tuple(row.get("stats", ()))})
        except TypeError as e:
            raise LabkitError(f"{TABLE_FILE}: field[{i}]: {e}")
        if d.load and (d.load not in families() or d.load_convert not in CONVERSIONS or not d.load_differs):
            raise LabkitError(
                f"{TABLE_FILE}: field[{i}].load: {d.load!r} needs a catalogue family, a conversion and load_differs"
            )
        if d.convert not in CONVERSIONS:
            raise LabkitError(
                f"{TABLE_FILE}: field[{i}].convert: {d.convert!r} is not one of {list(CONVERSIONS)}"
            )
        key = d.key_of(d.field)
        if key in out:
            raise LabkitError(f"{TABLE_FILE}: field[{i}]: {key} is defined twice")
        out[key] = d
    return out


def definition(fmt: str, field: str) -> Definition | None:
    """The row of a format's field, a <Q> row standing for every percentile; None when there is none."""
    table = definitions()
    found = table.get(f"{fmt}{KEY_SEP}{field}")
    if found is not None:
        return found
    head, _, stat = field.rpartition(".")
    metric = table.get(f"{fmt}{KEY_SEP}{head}")
    if metric is not None and stat in metric.stats:
        return statistic_of(metric, field, stat)
    base = table.get(f"{fmt}{KEY_SEP}{field.removesuffix(STD)}")
    if field.endswith(STD) and base is not None and base.std:
        return Definition(
            fmt,
            field,
            base.unit,
            f"population standard deviation (ddof 0) of the values behind {base.field}",
            base.cite,
        )
    for d in table.values():
        if d.format == fmt and PERCENTILE in d.field:
            head, _, tail = d.field.partition(PERCENTILE)
            if re.fullmatch(re.escape(head) + r"\d+(\.\d+)?" + re.escape(tail), field):
                return d
        if d.format == fmt and STATISTIC in d.field:
            head, _, tail = d.field.partition(STATISTIC)
            hit = re.fullmatch(re.escape(head) + r"(mean|median|std|p\d+(\.\d+)?)" + re.escape(tail), field)
            if hit:
                return statistic_of(d, field, hit.group(1))
    return None


STAT_WORDS = {"avg": "mean", "mean": "mean", "median": "median", "std": "population standard deviation"}
STAT_WORDS |= {"std_dev": "population standard deviation", "min": "smallest", "max": "largest"}


def statistic_of(metric: Definition, field: str, stat: str) -> Definition:
    """The row of one statistic of a metric row: `time_to_first_token.p99` of `time_to_first_token`."""
    word = STAT_WORDS.get(stat) or (f"{stat[1:]}th percentile" if stat.startswith("p") else stat)
    about = metric.about if stat == metric.about_stat else ""
    return Definition(
        metric.format,
        field,
        metric.unit,
        f"{word} of: {metric.text}",
        metric.cite,
        about=about,
        convert=metric.convert if about else "x",
        exact=metric.exact and bool(about),
        when=metric.when if about else "",
        load=metric.load,
        load_convert=metric.load_convert,
        load_differs=metric.load_differs,
    )


def is_defined(fmt: str, field: str) -> bool:
    """Whether the table has a row for this field of the format (a reader reads only those)."""
    return definition(fmt, field) is not None


def fields_of(fmt: str) -> list[Definition]:
    """Every row of one format, in the table's order."""
    return [d for d in definitions().values() if d.format == fmt]


def load_docs_table() -> str:
    """The rows that speak of a load measure at the result's level, as docs/imports.md carries them."""
    from tabulate import tabulate

    rows = [
        (f"`{d.format}`", f"`{d.field}`", f"`{d.load}`", d.load_convert, d.load_differs)
        for d in definitions().values()
        if d.load
    ]
    headers = ["format", "field", "labkit load measure (at the file's level)", "conversion", "how it differs"]
    return tabulate(rows, headers=headers, tablefmt="github")


def docs_table() -> str:
    """The definition table as Markdown, as docs/imports.md carries it."""
    from tabulate import tabulate

    rows = [
        (
            f"`{d.format}`",
            f"`{d.field}`" + (f" (.{', .'.join(d.stats)})" if d.stats else ""),
            d.unit,
            d.text,
            (
                f"`{d.about}`"
                + (" (c1)" if d.when == "c1" else "")
                + (f" from .{d.about_stat}" if d.about_stat else "")
                + f" = {d.convert}"
            )
            if d.about
            else "—",
            "exact" if d.exact else ("not exact" if d.about else "—"),
            d.cite,
        )
        for d in definitions().values()
    ]
    headers = ["format", "field", "unit", "definition", "about (labkit measure = conversion)", "conversion"]
    headers.append("where the tool defines it")
    return tabulate(rows, headers=headers, tablefmt="github")
