"""aiperf profile exports (`profile_export_aiperf.json`, aiperf 0.13, schema 1.x): a header and one top-level key
per metric, each `{unit, avg, p1 ... p99, min, max, std}`. One file is one result. A metric the definition
table has is read with its statistics, its unit checked against the table's; any other metric is aiperf's own
and kept unread; a key that is neither a metric nor one of the header's is refused. docs/imports.md, "aiperf".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labkit.exchange.definitions import fields_of
from labkit.exchange.formats import Format, ReadOptions
from labkit.exchange.jsonfile import Doc, Loaded
from labkit.exchange.model import UNKNOWN, Imported, Setting

NAME, TOOL = "aiperf", "aiperf"
HEADER = frozenset(
    {
        "schema_version",
        "aiperf_version",
        "benchmark_id",
        "input_config",
        "run_info",
        "was_cancelled",
        "is_complete",
        "incomplete_reason",
        "error_summary",
        "start_time",
        "end_time",
        "telemetry_data",
        "warmup_metrics",
        "metadata",
        "branch_stats",
        "pooled_spec_decode_acceptance_histogram",
    }
)
# which of aiperf's two token counts the figures rest on (input_config.endpoint.use_server_token_count): the
# server's usage is the definition table's first branch; the others get definition ids of their own
TOKEN_COUNTS: dict[bool | None, tuple[str, str] | None] = {
    True: None,
    False: ("client-tokenizer", "tokens counted by aiperf's tokenizer, not the server's usage"),
    None: (
        "token-count-unknown",
        "the file does not say whether the server or aiperf's tokenizer counted tokens",
    ),
}
METRIC_KEYS = frozenset({"unit", "avg", "min", "max", "std", "count", "sum"})


def signature(doc: Mapping[str, Any]) -> str | None:
    """aiperf's header: `aiperf_version`."""
    return "aiperf_version" if "aiperf_version" in doc else None


def is_metric(value: Any) -> bool:
    """A top-level object aiperf writes for a metric: a unit beside an average."""
    return isinstance(value, dict) and "unit" in value and "avg" in value


def _metric_keys_ok(m: Doc, keep: list[str] | None) -> None:
    """A metric's keys are aiperf's statistics (unit, avg, p1 ... p99, ...); any other refused, or listed in
    `keep` with --extra-keys."""
    percentiles = {k for k in m.data if k.startswith("p") and k[1:].replace(".", "").isdigit()}
    m.check_keys(METRIC_KEYS | percentiles, TOOL, keep)


def _setting(top: Doc, figures: Mapping[str, float]) -> Setting:
    """The concurrency (or request rate and arrival pattern) of the profiling phase and the configured ISL/OSL,
    where input_config names them (its layout moves between versions: read defensively, None when not found)."""
    config = top.mapping("input_config")
    concurrency = None
    rate: str | None = None
    schedule: str | None = None
    for phase in config.get("phases") or []:
        if not (isinstance(phase, dict) and phase.get("kind") == "profiling"):
            continue
        if isinstance(phase.get("concurrency"), int):
            concurrency = phase["concurrency"]
        paced = phase.get("request_rate")
        if isinstance(paced, int | float) and not isinstance(paced, bool) and 0 < paced < float("inf"):
            # request-rate mode: its concurrency (when set) only a cap, as vLLM's max_concurrency at a rate
            rate = f"{paced:g}"
            pattern = phase.get("arrival_pattern")
            schedule = pattern if isinstance(pattern, str) else None
    prompts: dict[str, Any] = {}
    for dataset in config.get("datasets") or []:
        if isinstance(dataset, dict) and isinstance(dataset.get("prompts"), dict):
            prompts = dataset["prompts"]

    def mean_of(key: str) -> int | None:
        value = (prompts.get(key) or {}).get("mean") if isinstance(prompts.get(key), dict) else None
        return int(value) if isinstance(value, int | float) else None

    requests = figures.get("request_count.avg")
    return Setting(
        concurrency=concurrency,
        rate=rate,
        schedule=schedule,
        prompt_tokens=mean_of("isl"),
        output_tokens=mean_of("osl"),
        requests=int(requests) if requests is not None else None,
    )


def read(loaded: Loaded, options: ReadOptions) -> list[Imported]:
    """The file's one result: the defined metrics with their statistics, the others kept unread."""
    top = Doc(loaded.path, loaded.docs[0])
    top.refuse_not_numbers()
    version = top.text("aiperf_version") or UNKNOWN
    defined = {d.field: d for d in fields_of(NAME)}
    figures: dict[str, float] = {}
    unread: list[str] = []
    for key, value in top.data.items():
        if key in HEADER:
            continue
        if not is_metric(value):
            if options.extra_keys:
                unread.append(key)
                continue
            raise top.unknown(key, TOOL)
        m = top.child(key)
        assert m is not None
        _metric_keys_ok(m, unread if options.extra_keys else None)
        d = defined.get(key)
        if d is None:
            unread.append(key)
            continue
        if m.data["unit"] != d.unit:
            raise m.fail(
                "unit", f"is {m.data['unit']!r}, where labkit's definition of {key} is in {d.unit!r}"
            )
        for stat in d.stats:
            if m.has(stat):
                figures[f"{key}.{stat}"] = m.number(stat) or 0.0
    notes = [f"aiperf metrics kept unread: {len(unread)}"] if unread else []
    if top.data.get("was_cancelled") or top.data.get("is_complete") is False:
        notes.append("aiperf says the run was cancelled or is incomplete")
    run_info = top.mapping("run_info")
    config = top.mapping("input_config")
    endpoint = config["endpoint"] if isinstance(config.get("endpoint"), dict) else {}
    counted = endpoint.get("use_server_token_count")
    counted = counted if isinstance(counted, bool) else None
    provenance = {
        "model": _model(config.get("models")),
        # True: token counts are the server's usage; False: aiperf's tokenizer counted the text
        "use_server_token_count": counted if counted is not None else UNKNOWN,
        "schema_version": top.text("schema_version", optional=True) or UNKNOWN,
        "benchmark_id": top.text("benchmark_id", optional=True) or UNKNOWN,
        "start_time": top.text("start_time", optional=True) or UNKNOWN,
        "cli_command": str(run_info.get("cli_command") or UNKNOWN),
    }
    return [
        Imported(
            format=NAME,
            tool=TOOL,
            tool_version=version,
            setting=_setting(top, figures),
            figures=figures,
            provenance=provenance,
            qualifier=TOKEN_COUNTS[counted],
            ok=int(figures["request_count.avg"]) if "request_count.avg" in figures else None,
            failed=_failed(top),
            notes=tuple(notes),
            unread=tuple(unread),
        )
    ]


def _model(models: Any) -> str:
    """The first model aiperf was pointed at: `input_config.models` is `{items: [{name}]}` in 0.13 and a list
    of names or of such objects elsewhere; "unknown" for any other shape."""
    items = models.get("items") if isinstance(models, dict) else models
    first = items[0] if isinstance(items, list) and items else None
    name = first.get("name") if isinstance(first, dict) else first
    return str(name) if isinstance(name, str) and name else UNKNOWN


def _failed(top: Doc) -> int | None:
    """The requests that ended in an error: aiperf's error_request_count metric when it wrote one, else the sum
    of its error summary's counts (an empty summary: none failed)."""
    metric = top.child("error_request_count", optional=True)
    if metric is not None and metric.has("avg"):
        return int(metric.number("avg") or 0)
    summary = top.data.get("error_summary")
    if not isinstance(summary, list):
        return None
    counts = [e.get("count") for e in summary if isinstance(e, dict)]
    return sum(c for c in counts if isinstance(c, int) and c >= 0)


FORMAT = Format(NAME, TOOL, signature, read)
