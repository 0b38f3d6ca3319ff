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


LIST = r"\[(-?\d+(,-?\d+)*)?\]"  # a JSON list of whole numbers as split_chunks writes it


def read_chunk_cells(file: Path, response_ids: Sequence[str]) -> dict[str, list[str]]:
    """{"chunk_t": cells, "chunk_n": cells} of a chunk file, one JSON list text per request of requests.csv
    (whose response ids are `response_ids`), every cell checked (vectorised: the lists are not parsed here).
    Rows beyond requests.csv's are ignored: a crash between the two writes leaves the chunk file the newer
    (it is written first). ResultsError naming the file when it is missing, no gzip'd CSV, has other
    columns, misses a row, keys a row to another request or holds a cell that is no list of whole numbers."""
    import pandas as pd

    try:
        df = pd.read_csv(file, compression="gzip", dtype=str, na_filter=False, encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{file}: missing (run schema >= {CHUNKS_SINCE} keeps the chunk stamps there)")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError) as e:  # ParserError is one
        raise ResultsError(f"{file}: not a readable gzip'd CSV ({type(e).__name__}: {e})") from None
    if tuple(df.columns) != HEADER:
        raise ResultsError(f"{file}: header {list(df.columns)!r}, expected {','.join(HEADER)}")
    n = len(response_ids)
    if len(df) < n:
        raise ResultsError(f"{file}: {len(df)} rows, requests.csv has {n}")
    df = df.iloc[:n]
    keyed = (df["row"] == [str(i) for i in range(n)]) & (df["response_id"] == list(response_ids))
    if not keyed.all():
        i = int((~keyed).to_numpy().argmax())
        got = [df["row"].iat[i], df["response_id"].iat[i]]
        raise ResultsError(
            f"{file}: row {i} is {got!r}, expected row {i} of response id {response_ids[i]!r} (requests.csv)"
        )
    for col in CHUNK_COLUMNS:
        bad = ~df[col].str.fullmatch(LIST)
        if bad.any():
            i = int(bad.to_numpy().argmax())
            raise ResultsError(
                f"{file}: row {i} {col}: {df[col].iat[i][:40]!r} is not a JSON list of whole numbers"
            )
    stamps, counts = (df[c].str.count(",") + (df[c] != "[]") for c in CHUNK_COLUMNS)
    bad = (df["chunk_n"] != "[]") & (counts != stamps)
    if bad.any():
        i = int(bad.to_numpy().argmax())
        raise ResultsError(f"{file}: row {i}: {counts.iat[i]} chunk_n for {stamps.iat[i]} chunk_t")
    return {c: df[c].tolist() for c in CHUNK_COLUMNS}


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
