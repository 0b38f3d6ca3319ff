"""Every format `labkit import` reads, by name (docs/imports.md, "Formats and how they are recognised")."""

from __future__ import annotations

from labkit.exchange import aiperf, guidellm, llama_benchy, sglang_bench, vllm_bench
from labkit.exchange.formats import Format

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (vllm_bench.FORMAT, llama_benchy.FORMAT, guidellm.FORMAT, aiperf.FORMAT, sglang_bench.FORMAT)
}
FORMAT_NAMES = tuple(FORMATS)
