"""Recorded result files of other tools (tests/support/fixtures/imports/, how each was made in its README) and
hostile variants of them for the import tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
IMPORTS = FIXTURES / "imports"


def edited(src: Path, dst: Path, change: dict[str, Any], drop: tuple[str, ...] = ()) -> Path:
    """A copy of a recorded JSON result with keys changed or added (`change`) and removed (`drop`)."""
    doc = json.loads(src.read_text())
    doc.update(change)
    for key in drop:
        doc.pop(key, None)
    dst.write_text(json.dumps(doc))
    return dst
