"""guidellm benchmark reports (`guidellm run ... --output kind=json`, schema version 2, guidellm 0.7 and later):
one result per entry of `benchmarks`, each metric read from its `successful` distribution (the statistics of
the requests that ended well), the strategy giving the concurrency.

The report nests deep (the scenario, scheduler state, every request); the reader checks the keys of every
object it reads (the report, each benchmark, the metrics it takes and their statistics) and keeps the rest
in the original file. docs/imports.md, "guidellm".
"""

from __future__ import annotations

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


def signature(doc: Mapping[str, Any]) -> str | None:
    """guidellm's report: `metadata.guidellm_version` beside a `benchmarks` list."""
    meta = doc.get("metadata")
    if isinstance(meta, dict) and "guidellm_version" in meta and isinstance(doc.get("benchmarks"), list):
        return "metadata.guidellm_version"
    return None


def _concurrency(bench: Doc) -> int | None:
    """Synchronous is one request at a time; a concurrent strategy names its streams; a rate has none."""
    config = bench.child("config")
    strategy = config.child("strategy") if config is not None else None
    if strategy is None:
        return None
    kind = strategy.text("type_")
    if kind == "synchronous":
        return 1
    if kind == "concurrent":
        return int(strategy.number("streams", minimum=1) or 0) or None
    return None


def read_benchmark(bench: Doc, index: int, version: str, options: ReadOptions) -> Imported:
    if not options.extra_keys:
        bench.refuse_unknown(BENCHMARK, TOOL)
    if bench.text("type_") != "generative_benchmark":
        raise bench.fail("type_", f"is {bench.data.get('type_')!r}, not a generative_benchmark")
    metrics = bench.child("metrics")
    assert metrics is not None
    figures: dict[str, float] = {"duration": bench.number("duration") or 0.0}
    unread: list[str] = []
    totals = metrics.child("request_totals")
    assert totals is not None
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
        for stat in d.stats:
            source = percentiles if stat.startswith("p") else ok  # p50, p90, p99 sit under `percentiles`
            if source is not None and source.has(stat):
                figures[f"{d.field}.{stat}"] = source.number(stat) or 0.0
    concurrency = _concurrency(bench)
    setting = Setting(concurrency=concurrency, requests=int(figures["request_totals.successful"]))
    notes = [] if concurrency else ["a rate or sweep strategy: no fixed concurrency"]
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
    top = Doc(loaded.path, loaded.docs[0])
    top.refuse_not_numbers()
    if not options.extra_keys:
        top.refuse_unknown(TOP, TOOL)
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
    out = []
    for i, bench in enumerate(benches):
        imp = read_benchmark(bench, i, version, options)
        if imp.model == UNKNOWN and model != UNKNOWN:
            imp = Imported(**{**imp.__dict__, "provenance": {**imp.provenance, "model": model}})
        out.append(imp)
    return out


def _top_model(top: Doc) -> str:
    spec = ((top.data.get("config") or {}).get("spec")) or {}
    backend = spec.get("backend") if isinstance(spec, dict) else None
    return str(backend.get("model") or UNKNOWN) if isinstance(backend, dict) else UNKNOWN


FORMAT = Format(NAME, TOOL, signature, read)
