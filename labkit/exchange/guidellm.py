"""guidellm benchmark reports (`guidellm run ... --output kind=json`, schema version 2, guidellm 0.7 and later):
one result per entry of `benchmarks`, each metric read from its `successful` distribution (the statistics of
the requests that ended well), the strategy giving the concurrency.

The report nests deep (the scenario, scheduler state, every request); the reader checks the keys of every
object it reads (the report, each benchmark, the metrics it takes and their statistics) and keeps the rest
in the original file. docs/imports.md, "guidellm".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from labkit.exchange.definitions import fields_of
from labkit.exchange.formats import Format, ReadOptions
from labkit.exchange.jsonfile import Doc, ImportFileError, Loaded
from labkit.exchange.model import UNKNOWN, Imported, Setting

NAME, TOOL = "guidellm", "guidellm"
SCHEMA = 2
TOP = frozenset({"metadata", "config", "benchmarks", "conclusions"})
BENCHMARK = frozenset(
    {
        "type_",
        "config",
        "scheduler_state",
        "scheduler_metrics",
        "metrics",
        "requests",
        "warnings",
        "start_time",
        "end_time",
        "duration",
        "warmup_duration",
        "cooldown_duration",
    }
)
STATUSES = ("successful", "errored", "incomplete")
SUMMARY = frozenset({*STATUSES, "total"})  # a metric: one distribution per request status
DISTRIBUTION = frozenset(
    {
        "mean",
        "median",
        "mode",
        "variance",
        "std_dev",
        "min",
        "max",
        "count",
        "total_sum",
        "percentiles",
        "pdf",
        "mean_ci",
        "percentile_cis",
    }
)
PERCENTILE = re.compile(r"p\d+")  # p001 (0.1 %), p50, p999 (99.9 %)


def signature(doc: Mapping[str, Any]) -> str | None:
    """guidellm's report: `metadata.guidellm_version` beside a `benchmarks` list."""
    meta = doc.get("metadata")
    if isinstance(meta, dict) and "guidellm_version" in meta and isinstance(doc.get("benchmarks"), list):
        return "metadata.guidellm_version"
    return None


def _pace(bench: Doc) -> Setting:
    """How the benchmark sent its requests, from its strategy: synchronous is one at a time, concurrent names its
    streams, throughput sends all at once (up to its max_concurrency), constant and poisson name a rate."""
    config = bench.child("config")
    strategy = config.child("strategy") if config is not None else None
    if strategy is None:
        return Setting()
    kind = strategy.text("type_")
    cap = strategy.number("max_concurrency", optional=True, minimum=1)
    if kind == "synchronous":
        return Setting(concurrency=1)
    if kind == "concurrent":
        return Setting(concurrency=int(strategy.number("streams", minimum=1) or 0) or None)
    if kind == "throughput":
        return Setting(concurrency=int(cap) if cap else None, rate="inf", schedule=kind)
    if kind in ("constant", "poisson"):  # a rate, its requests capped at max_concurrency when set
        return Setting(
            concurrency=int(cap) if cap else None, rate=f"{strategy.number('rate'):g}", schedule=kind
        )
    return Setting(schedule=_slug(kind))


def _slug(word: str | None) -> str:
    return "".join(ch for ch in str(word) if ch.isalnum()) or "unknown"


def lengths(top: Doc) -> tuple[int | None, int | None, str]:
    """(prompt, output tokens, a note) of the report's data: the configured lengths of one synthetic_text
    source with no spread; (None, None, why) for anything else (a dataset, several sources, lengths drawn)."""
    spec = top.mapping("config").get("spec")
    data = spec.get("data") if isinstance(spec, dict) else None
    if not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], dict):
        return None, None, "the report's data is not one synthetic source: lengths not given"
    source = data[0]
    spread = [
        k for k in source if k.startswith(("prompt_tokens_", "output_tokens_")) and source[k] is not None
    ]
    sizes = (source.get("prompt_tokens"), source.get("output_tokens"))
    if source.get("kind") != "synthetic_text" or spread or not all(isinstance(v, int) for v in sizes):
        return None, None, "prompt and output lengths varied or came from a dataset: lengths not given"
    return sizes[0], sizes[1], ""


def read_benchmark(
    bench: Doc, index: int, version: str, options: ReadOptions, sizes: tuple[int | None, int | None, str]
) -> Imported:
    """One benchmark of the report: its successful distributions, request counts and setting."""
    unread: list[str] = []
    keep = unread if options.extra_keys else None
    bench.check_keys(BENCHMARK, TOOL, keep)
    if bench.text("type_") != "generative_benchmark":
        raise bench.fail("type_", f"is {bench.data.get('type_')!r}, not a generative_benchmark")
    metrics = bench.child("metrics")
    assert metrics is not None
    figures: dict[str, float] = {"duration": bench.number("duration") or 0.0}
    totals = metrics.child("request_totals")
    assert totals is not None
    totals.check_keys(SUMMARY, TOOL, keep)
    for status in STATUSES:
        figures[f"request_totals.{status}"] = totals.number(status) or 0.0
    for d in fields_of(NAME):
        if not d.stats:
            continue
        summary = metrics.child(d.field, optional=True)
        if summary is None:
            unread.append(f"metrics.{d.field} (absent)")
            continue
        ok = summary.child("successful")
        assert ok is not None
        percentiles = ok.child("percentiles", optional=True)
        summary.check_keys(SUMMARY, TOOL, keep)
        ok.check_keys(DISTRIBUTION, TOOL, keep)
        if percentiles is not None:
            named = {k for k in percentiles.data if PERCENTILE.fullmatch(k)}
            percentiles.check_keys(named, TOOL, keep)
        for stat in d.stats:
            source = percentiles if stat.startswith("p") else ok  # p50, p90, p99 sit under `percentiles`
            if source is not None and source.has(stat):
                figures[f"{d.field}.{stat}"] = source.number(stat) or 0.0
    pace = _pace(bench)
    setting = Setting(
        **{**pace.to_dict(), "prompt_tokens": sizes[0], "output_tokens": sizes[1]},
        requests=int(figures["request_totals.successful"]),
    )
    notes = [] if pace.concurrency else [f"a {pace.schedule or 'rate'} strategy: no fixed concurrency"]
    if sizes[2]:
        notes.append(sizes[2])
    return Imported(
        format=NAME,
        tool=TOOL,
        tool_version=version,
        setting=setting,
        figures=figures,
        provenance={"model": _model(bench), "strategy": (bench.data.get("config") or {}).get("strategy")},
        index=index,
        ok=int(figures["request_totals.successful"]),
        failed=int(figures["request_totals.errored"] + figures["request_totals.incomplete"]),
        notes=tuple(notes),
        unread=tuple(unread),
    )


def _model(bench: Doc) -> str:
    backend = ((bench.data.get("config") or {}).get("backend")) or {}
    return str(backend.get("model") or UNKNOWN) if isinstance(backend, dict) else UNKNOWN


def read(loaded: Loaded, options: ReadOptions) -> list[Imported]:
    """Every benchmark of the report, each one result; a schema other than 2 is refused."""
    top = Doc(loaded.path, loaded.docs[0])
    top.refuse_not_numbers()
    top_unread: list[str] = []
    top.check_keys(TOP, TOOL, top_unread if options.extra_keys else None)
    meta = top.child("metadata")
    assert meta is not None
    if meta.data.get("version") != SCHEMA:
        raise meta.fail(
            "version", f"is {meta.data.get('version')!r}: labkit reads guidellm's report schema {SCHEMA}"
        )
    version = meta.text("guidellm_version") or UNKNOWN
    benches = top.items("benchmarks")
    if not benches:
        raise ImportFileError(f"{loaded.path}: key 'benchmarks' is empty: the report holds no benchmark")
    model = _top_model(top)
    sizes = lengths(top)
    out = []
    for i, bench in enumerate(benches):
        imp = read_benchmark(bench, i, version, options, sizes)
        provenance = {**imp.provenance, "model": model} if imp.model == UNKNOWN else imp.provenance
        out.append(
            Imported(**{**imp.__dict__, "provenance": provenance, "unread": (*top_unread, *imp.unread)})
        )
    return out


def _top_model(top: Doc) -> str:
    spec = ((top.data.get("config") or {}).get("spec")) or {}
    backend = spec.get("backend") if isinstance(spec, dict) else None
    return str(backend.get("model") or UNKNOWN) if isinstance(backend, dict) else UNKNOWN


FORMAT = Format(NAME, TOOL, signature, read)
