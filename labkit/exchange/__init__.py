"""Exchange, beside report: other benchmark tools' result files in, stored runs out (`labkit import`), and a
stored labkit run out in their formats (`labkit export`). Each imported figure keeps its own name and unit
and carries its definition; it stands for a labkit measure only where the definitions are the same
(docs/imports.md).

Its modules, each with what it is for: docs/architecture.md, "Packages" (generated from their docstrings).
"""

from labkit.exchange.formats import ReadOptions
from labkit.exchange.importing import import_file
from labkit.exchange.refresh import refresh_imports
from labkit.exchange.run_export import export_run

__all__ = [
    "ReadOptions",
    "export_run",
    "import_file",
    "refresh_imports",
]
