"""Exchange, beside report: other benchmark tools' result files in, stored runs out (`labkit import`), and a
stored labkit run out in their formats (`labkit export`). Each imported figure keeps its own name and unit
and carries its definition; it stands for a labkit measure only where the definitions are the same
(docs/imports.md).

jsonfile.py: reading a file without trusting it (size, JSON, NaN, keys named in every error); model.py: what
one result of another tool holds (`Imported`, `Setting`); definitions.py with definitions.toml: the table of
what each tool's field means and where the tool says so; formats.py: a format and its recognition by keys;
registry.py: the formats labkit reads; vllm_bench.py: `vllm bench serve` results; llama_benchy.py: llama-benchy
JSON (0.4); guidellm.py: guidellm reports (schema 2); aiperf.py: aiperf's aggregate export; sglang_bench.py:
SGLang bench_serving lines; importing.py: storing the results of one file as runs; export.py: a labkit run in those two
formats (pure); run_export.py: `export_run`, a stored run found and exported.
"""

from labkit.exchange.formats import ReadOptions
from labkit.exchange.importing import import_file
from labkit.exchange.run_export import export_run

__all__ = [
    "ReadOptions",
    "export_run",
    "import_file",
]
