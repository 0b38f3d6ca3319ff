"""Request records to requests.csv text: RequestRecord.columns() first, then any extra keys the rows carry.

Lists and dicts (per-chunk stamps, raw usage) are stored as JSON so they read back exactly; the loader reads
the string columns back as text (TEXT_COLUMNS) so a nonce like "0e1234" or "0042" never becomes a number.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from labkit.measure import RequestRecord

# requests.csv columns read back as text: a nonce like "0e1234" or "0042" must not become a number.
TEXT_COLUMNS = frozenset(f.name for f in dataclasses.fields(RequestRecord) if str(f.type).startswith("str"))


def csv_value(value: Any) -> Any:
    """One CSV cell: lists and dicts (per-chunk stamps, raw usage) as JSON, so they read back exactly."""
    if value is None:
        return ""
    if isinstance(value, list | dict | tuple):
        return json.dumps(value, separators=(",", ":"))
    return value


def requests_csv(
    records: Iterable[RequestRecord | Mapping[str, Any]], skip: Collection[str] = ()
) -> tuple[str, int]:
    """(requests.csv text, number of rows) for RequestRecords or row dicts, without the columns in `skip`
    (the chunk lists, which a run of schema >= 2 keeps in its chunk file)."""
    rows = [r.to_row() if hasattr(r, "to_row") else dict(r) for r in records]
    rows = [{k: v for k, v in row.items() if k not in skip} for row in rows] if skip else rows
    columns = [c for c in RequestRecord.columns() if c not in skip]
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: csv_value(v) for k, v in row.items()})
    return buf.getvalue(), len(rows)
