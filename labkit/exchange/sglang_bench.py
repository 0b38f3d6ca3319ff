"""SGLang `bench_serving` results (`python -m sglang.bench_serving ... --output-file F`, 0.5): one JSON line
appended per run, the run's arguments echoed beside its statistics in ms. Its default request rate is written
as the bare `Infinity`, read here as "inf" (only there: a NaN or Infinity anywhere else is refused). The
line names no version of the bench; `server_info.version` is the SGLang *server's*, when the server was one.
docs/imports.md, "SGLang bench_serving".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labkit.exchange.formats import Format, ReadOptions, documents, flat_figures
from labkit.exchange.jsonfile import Doc, Loaded, NotANumber
from labkit.exchange.model import UNKNOWN, Imported, Setting

NAME, TOOL = "sglang-bench", "sglang bench_serving"
ARGS = frozenset(
    {
        "tag",
        "backend",
        "dataset_name",
        "request_rate",
        "max_concurrency",
        "sharegpt_output_len",
        "random_input_len",
        "random_output_len",
        "random_range_ratio",
        "server_info",
        "goodput_slos_ms",
        "slo_attainment_by_metric",
        "cache_report",
    }
)
DETAILS = frozenset(
    {
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "generated_texts",
        "errors",
        "cached_tokens",
        "cached_tokens_details",
    }
)


def signature(doc: Mapping[str, Any]) -> str | None:
    """SGLang's line: `total_output_tokens_retokenized` beside `median_e2e_latency_ms`, in every version seen."""
    if "total_output_tokens_retokenized" in doc and "median_e2e_latency_ms" in doc:
        return "total_output_tokens_retokenized"
    return None


def read_line(d: Doc, index: int, options: ReadOptions) -> Imported:
    """One line: its figures, its setting (the lengths only where the random dataset fixed them) and what it
    says of the server."""
    d.refuse_not_numbers(allow=("request_rate",))
    figures, unread = flat_figures(d, NAME, TOOL, ARGS | DETAILS, options)
    concurrency = d.number("max_concurrency", optional=True, minimum=1)
    ratio = d.number("random_range_ratio", optional=True)
    random = str(d.data.get("dataset_name") or "").startswith("random")
    setting = Setting(
        concurrency=int(concurrency) if concurrency is not None else None,
        prompt_tokens=int(d.number("random_input_len") or 0) if random and ratio == 1 else None,
        output_tokens=int(d.number("random_output_len") or 0) if random and ratio == 1 else None,
        requests=int(figures["completed"]),
        rate=_rate(d),
    )
    server = d.mapping("server_info")
    notes = []
    if random and ratio != 1:
        notes.append(f"random_range_ratio {ratio}: prompt and output lengths varied, up to the lengths given")
    provenance = {
        "model": str(server.get("model_path") or UNKNOWN),
        "backend": d.text("backend", optional=True) or UNKNOWN,
        "dataset": d.text("dataset_name", optional=True) or UNKNOWN,
        "tag": d.text("tag", optional=True),
        "engine_version": str(server.get("version") or UNKNOWN),  # the server's, when it was SGLang
    }
    return Imported(
        format=NAME,
        tool=TOOL,
        tool_version=UNKNOWN,
        setting=setting,
        figures=figures,
        provenance=provenance,
        index=index,
        ok=int(figures["completed"]),  # the line counts no failed requests
        notes=tuple(notes),
        unread=tuple(unread),
    )


def _rate(d: Doc) -> str:
    """The request rate: SGLang writes its default, all at once, as the bare `Infinity`; a NaN or -Infinity
    there is no rate."""
    rate = d.data.get("request_rate")
    if rate is None or (isinstance(rate, NotANumber) and rate.text == "Infinity"):
        return "inf"
    if isinstance(rate, NotANumber):
        raise d.fail("request_rate", f"is {rate.text}: a request rate is a number or Infinity (all at once)")
    return f"{d.number('request_rate'):g}"


def read(loaded: Loaded, options: ReadOptions) -> list[Imported]:
    """Every line of the file, each one result."""
    return [read_line(d, i, options) for i, d in enumerate(documents(loaded, signature, TOOL))]


FORMAT = Format(NAME, TOOL, signature, read, lines=True)
