"""Rewrite the catalogue table of docs/measurement.md (between its markers) from labkit/measures.toml;
tests/test_measures.py fails until this has been run after a change to the catalogue.

    .venv/bin/python tools/measures_doc.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit.measures import docs_table  # noqa: E402
from tools.docgen import REPO, rewrite  # noqa: E402

DOC = REPO / "docs" / "measurement.md"

if __name__ == "__main__":
    rewrite(DOC, {"catalogue": docs_table()})
    print(f"wrote the catalogue table of {DOC}")
