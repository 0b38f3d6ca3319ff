"""llama-benchy `--format json` files (0.4): a header (version, latency mode and probe latency, model, prefix
caching) and one row per concurrency, depth, prompt and response size, each metric `{mean, std, values}`.
Each row is one result; a metric's mean is stored under its own name and its std beside it.

llama-benchy 0.3 and earlier computed the decode figure differently (chunks over a span ending after
[DONE]); their files are refused rather than read under 0.4's definitions. docs/imports.md, "llama-benchy".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labkit.exchange.definitions import STD
from labkit.exchange.formats import Format, ReadOptions
from labkit.exchange.jsonfile import Doc, ImportFileError, Loaded
from labkit.exchange.model import EXPORT_VERSION, EXPORTED, EXPORTER, UNKNOWN, Imported, Setting

NAME, TOOL = "llama-benchy", "llama-benchy"
HEADER = frozenset(
    {
        "version",
        "timestamp",
        "latency_mode",
        "latency_ms",
        "model",
        "prefix_caching_enabled",
        "max_concurrency",
        "benchmarks",
        "prompt_source",
        "dataset_revision",
    }
)
SETTING = frozenset(
    {"concurrency", "context_size", "prompt_size", "response_size", "is_context_prefill_phase", "prompt_id"}
)
METRICS = (
    "pp_throughput",
    "pp_req_throughput",
    "tg_throughput",
    "tg_req_throughput",
    "peak_throughput",
    "peak_req_throughput",
    "ttfr",
    "est_ppt",
    "e2e_ttft",
)
SERIES = frozenset({"throughput_over_time", "requests_throughput_over_time"})
STAT_KEYS = frozenset({"mean", "std", "values"})


def signature(doc: Mapping[str, Any]) -> str | None:
    """llama-benchy's header: `latency_mode` beside a `benchmarks` list."""
    return "latency_mode" if "latency_mode" in doc and isinstance(doc.get("benchmarks"), list) else None


def _version(d: Doc) -> str:
    version = d.text("version")
    assert version is not None
    if not (version.startswith("0.4") or version.startswith(EXPORT_VERSION)):
        raise d.fail(
            "version",
            f"is {version!r}: labkit reads llama-benchy 0.4 files (0.3 and earlier computed tg_throughput over "
            "chunks and a span ending after [DONE], docs/imports.md)",
        )
    return version


def _metric(row: Doc, name: str, figures: dict[str, float], unread: list[str], options: ReadOptions) -> int:
    """The metric's mean and std into `figures`, its other keys into `unread` (with --extra-keys; refused
    otherwise); how many values it has (0 when the row has none)."""
    m = row.child(name, optional=True)
    if m is None:
        return 0
    m.check_keys(STAT_KEYS, f"{TOOL} ({name})", unread if options.extra_keys else None)
    values = m.numbers("values") or []
    mean, std = m.number("mean", optional=True), m.number("std", optional=True)
    if mean is not None:
        figures[name] = mean
    if std is not None:
        figures[name + STD] = std
    return len(values)


def read_row(header: Doc, row: Doc, index: int, version: str, options: ReadOptions) -> Imported:
    """One row of `benchmarks`: its metrics' means and stds and the setting it ran."""
    known = SETTING | SERIES | set(METRICS)
    if not options.extra_keys:
        row.refuse_unknown(known, TOOL)
    unread = [k for k in row.data if k not in known]
    figures: dict[str, float] = {}
    counts = {name: _metric(row, name, figures, unread, options) for name in METRICS}
    if not figures:
        raise ImportFileError(
            f"{row.path}: key '{row.where}' holds none of llama-benchy's metrics ({', '.join(METRICS)}): a row "
            "that measured nothing"
        )
    requests = counts["e2e_ttft"] or counts["ttfr"] or None
    context = int(row.number("context_size") or 0)
    prefill_phase = bool(row.data.get("is_context_prefill_phase"))
    setting = Setting(
        concurrency=int(row.number("concurrency", minimum=1) or 1),
        prompt_tokens=int(row.number("prompt_size") or 0),
        output_tokens=int(row.number("response_size") or 0),
        depth=context,
        requests=requests,
        phase="context-load" if prefill_phase else None,
    )
    notes = []
    if prefill_phase:
        notes.append("the context-loading request of a prefix-caching depth run (is_context_prefill_phase)")
    provenance = {
        "model": header.text("model", optional=True) or UNKNOWN,
        "timestamp_utc": header.text("timestamp", optional=True) or UNKNOWN,
        "latency_mode": header.text("latency_mode"),
        "latency_ms": header.number("latency_ms", optional=True),
        "prefix_caching_enabled": header.data.get("prefix_caching_enabled"),
        "context_prefill_phase": prefill_phase,
    }
    exported = version.startswith(EXPORT_VERSION)  # labkit's export: llama-benchy's fields, labkit's stamps
    tool = f"{EXPORTER} ({TOOL} format)" if exported else TOOL
    return Imported(
        format=NAME,
        tool=tool,
        tool_version=version,
        setting=setting,
        figures=figures,
        provenance=provenance,
        index=index,
        qualifier=EXPORTED if exported else None,
        ok=requests,  # a value per request that ended; failures not counted
        notes=tuple(notes),
        unread=tuple(unread),
    )


def read(loaded: Loaded, options: ReadOptions) -> list[Imported]:
    """Every row of the file, each one result; files before 0.4 are refused."""
    header = Doc(loaded.path, loaded.docs[0])
    header.refuse_not_numbers()
    known = HEADER
    if not options.extra_keys:
        header.refuse_unknown(known, TOOL)
    version = _version(header)
    header.number("latency_ms", optional=True)
    rows = header.items("benchmarks")
    if not rows:
        raise ImportFileError(f"{loaded.path}: key 'benchmarks' is empty: the run measured nothing")
    out = [read_row(header, row, i, version, options) for i, row in enumerate(rows)]
    unread = tuple(k for k in header.data if k not in known)
    return [Imported(**{**imp.__dict__, "unread": imp.unread + unread}) for imp in out]


FORMAT = Format(NAME, TOOL, signature, read)
