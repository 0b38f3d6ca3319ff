"""`labkit export RUN --format F`: a stored run found by its id (or folder), its request rows read back, and
the format's builder (export.py) run on them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from labkit import __version__
from labkit.exchange import export
from labkit.exchange.export import FORMATS, ExportError
from labkit.store import (
    IMPORT_SOURCE,
    REQUESTS_FILE,
    RUN_FILE,
    StoredRun,
    load_results,
    read_run,
    with_chunks,
)

JSON_COLUMNS = ("chunk_t", "chunk_n")  # JSON text in requests.csv (run schema 1) or the chunk file


def find_run(run: str, results: str | Path | None = None) -> tuple[StoredRun, Path]:
    """(the stored run, its folder) of a run id or a run folder; ExportError naming what exists when neither."""
    folder = Path(run)
    if (folder / RUN_FILE).is_file():
        return read_run(folder), folder
    data = load_results(results)
    if run not in data.docs:
        near = sorted(data.docs)[-5:]
        raise ExportError(
            f"no complete run {run!r} under {data.root}; the newest: {', '.join(near) or 'none'}"
        )
    doc = data.docs[run]
    return doc, doc.path


def request_rows(folder: Path) -> list[dict[str, Any]]:
    """The run's requests.csv as dicts, the per-chunk stamps (from the chunk file since run schema 2) parsed
    and empty cells None."""
    import pandas as pd

    file = folder / REQUESTS_FILE
    if not file.is_file():
        raise ExportError(f"{folder}: no {REQUESTS_FILE}: the run has no per-request stamps to write from")
    df = pd.read_csv(file, dtype={"group": str, "response_id": str})
    rows: list[dict[str, Any]] = with_chunks(df, folder, read_run(folder).schema_version).to_dict("records")
    for row in rows:
        for key in JSON_COLUMNS:
            value = row.get(key)
            row[key] = json.loads(value) if isinstance(value, str) and value else []
        for key, value in list(row.items()):
            if isinstance(value, float) and value != value:  # NaN: an empty cell
                row[key] = None
    return rows


def export_run(
    run: str, fmt: str, results: str | Path | None = None, concurrency: int = 1, level: str | None = None
) -> dict[str, Any]:
    """The run in format `fmt` (one of FORMATS); ExportError when the run is imported or lacks what it needs.
    `level` (vllm-bench only): a load level, `c4` or `2/s`, instead of the decode requests at `concurrency`."""
    if fmt not in FORMATS:
        raise ExportError(f"--format {fmt!r}: labkit writes {', '.join(FORMATS)}")
    doc, folder = find_run(run, results)
    if doc.source in (IMPORT_SOURCE, "recorded"):
        raise ExportError(f"run {doc.run_id} is {doc.source}ed, not measured by labkit: export its own file")
    if level is not None and fmt != "vllm-bench":
        raise ExportError(f"--level: only the vllm-bench format has a load level ({fmt} has none)")
    rows = request_rows(folder)
    if level is not None:
        return export.vllm_bench_level(doc, rows, export.parse_level(level))
    if fmt == "vllm-bench":
        return export.vllm_bench(doc, rows, concurrency)
    return export.llama_benchy(doc, rows, __version__)
