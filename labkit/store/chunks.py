"""Per-chunk stamps in a file of their own (chunks.csv.gz, run schema 2): requests.csv stays one short row per
request however many chunks a long load run streams, and a reader that needs no chunk pays nothing for them.

The file is a gzip'd CSV, one row per request in requests.csv order: `row` (its index there), `response_id`
(checked against requests.csv, so a file from another run or a shuffled one is refused), and `chunk_t` and
`chunk_n` as the JSON lists requests.csv held up to schema 1. Readers get the two columns back at their old
place (`with_chunks`), so the frames of old and new run folders look the same.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from labkit.measure import RequestRecord
from labkit.store.files import CHUNKS_FILE, CHUNKS_SINCE, ResultsError

CHUNK_COLUMNS = ("chunk_t", "chunk_n")  # the RequestRecord lists that live in the chunk file
HEADER = ("row", "response_id", *CHUNK_COLUMNS)


def _json_list(value: Any) -> str:
    return json.dumps(list(value or []), separators=(",", ":"))


def split_chunks(rows: Sequence[dict[str, Any]]) -> bytes:
    """The chunk file's bytes for these request rows, popping chunk_t/chunk_n out of each row so requests.csv
    is written without them. gzip's mtime is 0: the same records give the same bytes."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(HEADER)
    for i, row in enumerate(rows):
        lists = [_json_list(row.pop(c, None)) for c in CHUNK_COLUMNS]
        writer.writerow([i, row.get("response_id") or "", *lists])
    return gzip.compress(buf.getvalue().encode("utf-8"), compresslevel=6, mtime=0)


def _ints(cell: str, file: Path, where: str) -> list[int]:
    """One JSON list cell, checked to be a list of whole numbers; ResultsError naming the file and row."""
    try:
        value = json.loads(cell)
    except ValueError as e:
        raise ResultsError(f"{file}: {where}: not a JSON list ({e})") from None
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise ResultsError(f"{file}: {where}: expected a list of whole numbers")
    return value


def read_chunk_cells(file: Path, response_ids: Sequence[str]) -> dict[str, list[str]]:
    """{"chunk_t": cells, "chunk_n": cells} of a chunk file, one JSON list text per request of requests.csv
    (whose response ids are `response_ids`), every cell checked. Rows beyond requests.csv's are ignored: a
    crash between the two writes leaves the chunk file the newer (it is written first). ResultsError naming
    the file when it is missing, no gzip, has other columns, misses a row or keys a row to another request."""
    try:
        text = gzip.decompress(file.read_bytes()).decode("utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{file}: missing (run schema >= {CHUNKS_SINCE} keeps the chunk stamps there)")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise ResultsError(f"{file}: not a readable gzip'd CSV ({e})") from None
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or tuple(header) != HEADER:
        raise ResultsError(f"{file}: header {header!r}, expected {','.join(HEADER)}")
    cells: dict[str, list[str]] = {c: [] for c in CHUNK_COLUMNS}
    for i, want in enumerate(response_ids):
        line = next(reader, None)
        if line is None:
            raise ResultsError(f"{file}: {i} rows, requests.csv has {len(response_ids)}")
        if len(line) != len(HEADER) or line[0] != str(i) or line[1] != want:
            raise ResultsError(
                f"{file}: row {i} is {line[:2]!r}, expected row {i} of response id {want!r} (requests.csv)"
            )
        stamps, counts = (
            _ints(cell, file, f"row {i} {col}") for col, cell in zip(CHUNK_COLUMNS, line[2:], strict=True)
        )
        if counts and len(counts) != len(stamps):
            raise ResultsError(f"{file}: row {i}: {len(counts)} chunk_n for {len(stamps)} chunk_t")
        cells["chunk_t"].append(line[2])
        cells["chunk_n"].append(line[3])
    return cells


def chunks_apart(schema_version: int) -> bool:
    """Whether a run of this schema keeps its chunk stamps in the chunk file (else inside requests.csv)."""
    return schema_version >= CHUNKS_SINCE


def with_chunks(df: Any, folder: Path, schema_version: int) -> Any:
    """A requests.csv frame of one run folder with chunk_t/chunk_n as JSON text at their RequestRecord place,
    read from the chunk file when the run keeps them there; an older run's frame is returned as it is."""
    if not chunks_apart(schema_version) or "chunk_t" in df.columns:
        return df
    ids = ["" if v != v or v is None else str(v) for v in df["response_id"]]  # NaN: an empty cell
    cells = read_chunk_cells(folder / CHUNKS_FILE, ids)
    order = RequestRecord.columns()
    after = order[order.index(CHUNK_COLUMNS[-1]) + 1 :]
    at = next((df.columns.get_loc(c) for c in after if c in df.columns), len(df.columns))
    for offset, col in enumerate(CHUNK_COLUMNS):
        df.insert(at + offset, col, cells[col])
    return df
