"""Rewrite the definition table of docs/imports.md (between its markers) from labkit/exchange/definitions.toml;
tests/exchange/test_definitions.py fails until this has been run after a change to the table.

    .venv/bin/python tools/imports_doc.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.exchange.definitions import docs_table  # noqa: E402

START, END = "<!-- definitions:start -->\n", "\n<!-- definitions:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "imports.md"

text = DOC.read_text()
head, rest = text.split(START)
_, tail = rest.split(END)
DOC.write_text(head + START + docs_table() + END + tail)
print(f"wrote the definition table of {DOC}")
