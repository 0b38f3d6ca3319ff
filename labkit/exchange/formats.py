"""The formats `labkit import` reads and how a file is recognised: by its keys, never by its name. A file whose
keys fit no format, or fit two, or fit another than the one asked for, is refused saying which
(docs/imports.md, "Formats and how they are recognised").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from labkit.exchange.definitions import is_defined
from labkit.exchange.jsonfile import Doc, ImportFileError, Loaded
from labkit.exchange.model import Imported


@dataclass(frozen=True)
class ReadOptions:
    """How far to trust a file: `extra_keys` keeps keys the reader does not know (listed as unread) instead of
    refusing the file."""

    extra_keys: bool = False


@dataclass(frozen=True)
class Format:
    """One importable format: its name, the tool that writes it, the keys that identify it and its reader."""

    name: str
    tool: str
    signature: Callable[
        [Mapping[str, Any]], str | None
    ]  # the identifying key when the document is this format
    read: Callable[[Loaded, ReadOptions], list[Imported]]
    lines: bool = False  # written as JSON Lines (one result per line)


def detect(loaded: Loaded, formats: Mapping[str, Format], asked: str | None = None) -> Format:
    """The one format the file's first document fits; ImportFileError naming the file otherwise."""
    first = loaded.docs[0]
    if not isinstance(first, dict):
        raise ImportFileError(f"{loaded.path}: the top level is a {type(first).__name__}, not an object")
    fits = {name: key for name, f in formats.items() if (key := f.signature(first)) is not None}
    known = ", ".join(f"{f.name} ({f.tool})" for f in formats.values())
    if asked is not None and asked not in formats:
        raise ImportFileError(f"--format {asked!r} is not a format labkit reads; it reads {known}")
    if len(fits) > 1:
        claims = " and ".join(f"{name} (key '{key}')" for name, key in fits.items())
        raise ImportFileError(f"{loaded.path}: the file claims to be {claims}; a result file is one tool's")
    if not fits:
        keys = ", ".join(sorted(first)[:12])
        raise ImportFileError(
            f"{loaded.path}: not a result file of a tool labkit reads ({known}); its top-level keys: {keys}"
        )
    ((name, key),) = fits.items()
    if asked is not None and asked != name:
        raise ImportFileError(
            f"{loaded.path}: --format {asked}, but the file is {name} (key '{key}' is {formats[name].tool}'s)"
        )
    if loaded.lines and not formats[name].lines:
        raise ImportFileError(
            f"{loaded.path}: {name} writes one JSON document, and this file holds several lines"
        )
    return formats[name]


def documents(loaded: Loaded, signature: Callable[[Mapping[str, Any]], str | None], tool: str) -> list[Doc]:
    """Each document of a file whose format writes one result per line, named by its line for errors; a line
    that is not an object of the format is refused."""
    out = []
    for i, doc in enumerate(loaded.docs):
        where = f"line {i + 1}" if loaded.lines else ""
        if not isinstance(doc, dict) or signature(doc) is None:
            raise ImportFileError(f"{loaded.path}: {where or 'the file'} is not a {tool} result")
        out.append(Doc(loaded.path, doc, where))
    return out


def flat_figures(
    d: Doc,
    fmt: str,
    tool: str,
    skip: frozenset[str],
    options: ReadOptions,
    other: Callable[[str, Any], bool] | None = None,
) -> tuple[dict[str, float], list[str]]:
    """(figures, unread) of one flat result object, vllm bench serve's or an SGLang line: each key the definition
    table has, as a number (null: not written); `skip` keys are read elsewhere (header, arrays); any other key
    goes to `other` (True: it took the key), else is kept unread with --extra-keys, else refused by name.
    Both tools write `duration` and `completed` in every result: a result without them is refused."""
    figures: dict[str, float] = {}
    unread: list[str] = []
    for key, value in d.data.items():
        if key in skip:
            continue
        if is_defined(fmt, key):
            if value is not None:  # vLLM's request_goodput is null without --goodput
                figures[key] = d.number(key) or 0.0
        elif other is not None and other(key, value):
            continue
        elif options.extra_keys:
            unread.append(key)
        else:
            raise d.unknown(key, tool)
    for key in ("duration", "completed"):
        if key not in figures:
            raise d.fail(key, f"is missing: every {tool} result has it")
    return figures, unread
