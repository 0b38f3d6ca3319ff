"""Rewrite the definition table of docs/imports.md (between its markers) from labkit/exchange/definitions.toml;
tests/exchange/test_definitions.py fails until this has been run after a change to the table.

    .venv/bin/python tools/imports_doc.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.exchange.definitions import docs_table, load_docs_table  # noqa: E402
from tools.docgen import REPO, rewrite  # noqa: E402

DOC = REPO / "docs" / "imports.md"

if __name__ == "__main__":
    rewrite(DOC, {"definitions": docs_table(), "load-definitions": load_docs_table()})
    print(f"wrote the definition table of {DOC}")
