"""`vllm bench serve --save-result` files (one JSON object; `--append-result` makes them JSON Lines, one run per
line): the run's header, its statistics in ms under their own names, and nothing the file does not say.

The file carries no version of vLLM or of the bench; `--metadata K=V` pairs arrive as top-level string keys, so
a top-level key this reader does not know is taken as metadata when its value is text, and refused otherwise.
docs/imports.md, "vllm bench serve".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from labkit.exchange.formats import Format, ReadOptions, documents, flat_figures
from labkit.exchange.jsonfile import Doc, Loaded
from labkit.exchange.model import (
    EXPORT_RUN_KEY,
    EXPORT_VERSION,
    EXPORTED,
    EXPORTER,
    UNKNOWN,
    Imported,
    Setting,
)

NAME, TOOL = "vllm-bench", "vllm bench serve"
HEADER = frozenset(
    {
        "date",
        "endpoint_type",
        "backend",
        "label",
        "model_id",
        "tokenizer_id",
        "num_prompts",
        "request_rate",
        "burstiness",
        "max_concurrency",
        "ramp_up_strategy",
        "ramp_up_start_rps",
        "ramp_up_end_rps",
    }
)
# kept in the original file, not read as figures: per-request arrays (--save-detailed), texts, events
ARRAYS = frozenset(
    {
        "latencies",
        "queue_times",
        "input_lens",
        "output_lens",
        "ttfts",
        "itls",
        "start_times",
        "generated_texts",
        "errors",
        "spec_decode_per_position_acceptance_rates",
        "rps_change_events",
    }
)
STAT = re.compile(r"(mean|median|std|p\d+(\.\d+)?)_[a-z_]+_ms")
DATE = re.compile(r"\d{8}-\d{6}")


def signature(doc: Mapping[str, Any]) -> str | None:
    """vllm bench serve's header: `date` as YYYYMMDD-HHMMSS with `model_id` and `num_prompts` (SGLang has none of
    these; its latency keys end in _e2e_latency_ms, vLLM's in _e2el_ms)."""
    date = doc.get("date")
    if isinstance(date, str) and DATE.fullmatch(date) and "model_id" in doc and "num_prompts" in doc:
        return "date"
    return None


def _setting(d: Doc, figures: dict[str, float]) -> Setting:
    """The concurrency, rate and request count the header gives, and the lengths as the file counted them: it
    names no configured length, so the prompt and output tokens are the means per completed request."""
    rate = d.data.get("request_rate")
    concurrency = d.number("max_concurrency", optional=True, minimum=1)
    done = figures.get("completed") or 0

    def mean(total: str) -> int | None:
        return round(figures[total] / done) if done and total in figures else None

    finite = rate not in ("inf", None)  # NaN and Infinity were refused before
    return Setting(
        concurrency=int(concurrency) if concurrency is not None else None,
        prompt_tokens=mean("total_input_tokens"),
        output_tokens=mean("total_output_tokens"),
        requests=int(d.number("num_prompts", minimum=1) or 0),
        rate=f"{d.number('request_rate'):g}" if finite else "inf",
        # a finite rate's arrivals: gamma-distributed gaps, Poisson at burstiness 1
        schedule=_schedule(d) if finite else None,
        counted=True if done else None,
    )


def _schedule(d: Doc) -> str:
    """A finite rate's pacing: a labkit export's own arrival where vLLM has none (constant), else vLLM's."""
    named = d.data.get("labkit_arrival")
    return named if isinstance(named, str) and named else _pacing(d.number("burstiness", optional=True))


def _pacing(burstiness: float | None) -> str:
    return "poisson" if burstiness in (None, 1.0) else f"gamma{burstiness:g}"


def read_one(d: Doc, index: int, options: ReadOptions) -> Imported:
    """One result (the file, or one line of an --append-result file): its figures, setting and provenance;
    its per-request arrays checked, not read."""
    d.refuse_not_numbers()
    metadata: dict[str, str] = {}
    kept: list[str] = []

    def other(key: str, value: Any) -> bool:
        if STAT.fullmatch(key) or key.startswith(("diffusion_", "probe_")) or value is None:
            kept.append(key)  # a statistic or mode this reader has no definition for: kept, not read
            return True
        if isinstance(value, str):
            metadata[key] = value  # --metadata K=V
            return True
        return False

    figures, unread = flat_figures(d, NAME, TOOL, HEADER | ARRAYS, options, other)
    unread = kept + unread
    for key in ARRAYS & set(d.data):
        if key in ("latencies", "queue_times", "ttfts", "input_lens", "output_lens", "start_times"):
            d.numbers(key)
    if "itls" in d.data:
        for i, gaps in enumerate(d.data["itls"] if isinstance(d.data["itls"], list) else [None]):
            Doc(d.path, {"gaps": gaps}, d.at(f"itls[{i}]")).numbers("gaps")
    detailed = "ttfts" in d.data
    provenance = {
        "model": d.text("model_id"),
        "tokenizer": d.text("tokenizer_id", optional=True) or UNKNOWN,
        "backend": d.text("backend", optional=True) or UNKNOWN,
        "label": d.text("label", optional=True),
        "date_local": d.text("date"),  # the bench's local time: its zone is not in the file
        "metadata": metadata,
        "per_request_arrays": detailed,
    }
    notes = [] if detailed else ["no per-request TTFTs or ITLs in the file (written without --save-detailed)"]
    if unread:
        notes.append(f"kept unread: {', '.join(unread)}")
    exported = EXPORT_RUN_KEY in metadata  # labkit's export: vLLM's fields computed from labkit's stamps
    return Imported(
        format=NAME,
        tool=f"{EXPORTER} ({TOOL} format)" if exported else TOOL,
        # the bench writes no version; a --metadata version=... is the user's text, kept as metadata
        tool_version=EXPORT_VERSION + metadata["labkit_version"]
        if exported and metadata.get("labkit_version")
        else UNKNOWN,
        qualifier=EXPORTED if exported else None,
        setting=_setting(d, figures),
        figures=figures,
        provenance=provenance,
        index=index,
        ok=int(figures["completed"]),
        failed=int(figures["failed"]) if "failed" in figures else None,
        notes=tuple(notes),
        unread=tuple(unread),
    )


def read(loaded: Loaded, options: ReadOptions) -> list[Imported]:
    """The file's result, or each line's with --append-result."""
    return [read_one(d, i, options) for i, d in enumerate(documents(loaded, signature, TOOL))]


FORMAT = Format(NAME, TOOL, signature, read, lines=True)
