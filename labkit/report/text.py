"""Tables as aligned text for the terminal, and TableView: one object a notebook displays that Jupyter shows
as the styled HTML table and a terminal (papermill's log, `labkit run`) as text, notes included
(docs/measurement.md, "Tables in the terminal").

papermill logs an output's text/plain only, which for a pandas Styler or an IPython Markdown object is just
its type and address; TableView's text/plain is the table itself. Its TABLE_MIME entry marks the output as
a table, so `labkit run` can find the tables in the executed notebook when it did not log the outputs.
"""

from __future__ import annotations

import html
import textwrap
from typing import Any

from labkit.report.tables import Table, grid, runs_line, to_styler

TABLE_MIME = "application/x-labkit-table+json"
WIDTH = 100  # notes are wrapped to this many columns; the table itself is never wrapped


def to_text(table: Table, width: int = WIDTH) -> str:
    """The table as plain text: title, aligned columns (lane titles as headers, figures right-aligned), the
    runs line, then each note wrapped to `width`. Cells are printed as built, never re-parsed."""
    lines = [table.title, "=" * len(table.title), ""]
    frame = table.frame
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        lines.append(table.empty)
    else:
        lines += [grid(table, "simple"), "", runs_line(table)]
    for note in table.notes:
        lines += ["", textwrap.fill(note, width, break_long_words=False, break_on_hyphens=False)]
    return "\n".join(lines)


def to_html(table: Table) -> str:
    """The styled table (to_styler) with its notes as paragraphs below it."""
    notes = "".join(f"<p>{html.escape(note)}</p>" for note in table.notes)
    return str(to_styler(table).to_html()) + notes


class TableView:
    """What a notebook displays for a table: HTML in Jupyter, text in a terminal or papermill's log."""

    def __init__(self, table: Table) -> None:
        self.table = table

    def __repr__(self) -> str:
        return to_text(self.table)

    def _repr_html_(self) -> str:
        return to_html(self.table)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Only the marker; IPython adds text/plain and text/html from the two methods above."""
        return {TABLE_MIME: {"id": self.table.id, "title": self.table.title}}
