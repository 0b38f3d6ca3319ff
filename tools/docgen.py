"""The generated parts of docs/: a block between `<!-- NAME:start -->` and `<!-- NAME:end -->` that a tool
rewrites from the code (tools/imports_doc.py, tools/measures_doc.py, tools/modules_doc.py) and a test compares
with what the code says now, so what the code defines is never written out twice by hand."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def markers(name: str) -> tuple[str, str]:
    """The block's two marker lines; the newlines belong to them, so a block's text has no outer blank line."""
    return f"<!-- {name}:start -->\n", f"\n<!-- {name}:end -->"


def section(text: str, name: str) -> str:
    """The text between the block's markers, as the last generation wrote it."""
    start, end = markers(name)
    if start not in text or end not in text:
        raise KeyError(f"no {name!r} markers")
    return text.split(start, 1)[1].split(end, 1)[0]


def replaced(text: str, name: str, body: str) -> str:
    """`text` with the block's contents replaced by `body`; the markers and the rest stay."""
    start, end = markers(name)
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + body + end + tail


def rewrite(doc: Path, blocks: dict[str, str]) -> list[str]:
    """Each named block of `doc` rewritten; the names of those that changed (the file is written only then)."""
    text = doc.read_text()
    new = text
    for name, body in blocks.items():
        new = replaced(new, name, body)
    changed = [name for name, body in blocks.items() if section(text, name) != body]
    if new != text:
        doc.write_text(new)
    return changed
