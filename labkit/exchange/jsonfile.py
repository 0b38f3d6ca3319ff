"""Reading another tool's result file without trusting it: a size limit checked before reading, JSON that
refuses NaN and Infinity (naming the key), JSON Lines with the line named, and typed lookups whose errors
name the file and the key (docs/imports.md, "Files labkit refuses").

Pure apart from reading the one file; nothing here writes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError

MAX_BYTES = 64 * 1024 * 1024  # a result file of a few thousand requests is a few MB; past this it is not one


class ImportFileError(LabkitError):
    """A file that cannot be imported: names the file and, where there is one, the key."""


class NotANumber:
    """What json gives for NaN/Infinity here, so a reader can name the key that held it (or, where the tool
    writes one on purpose, such as SGLang's request rate `Infinity`, read it as that)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Loaded:
    """The file's documents (one for JSON, one per line for JSON Lines), its bytes and how it was read."""

    path: Path
    docs: tuple[Any, ...]
    data: bytes
    lines: bool  # JSON Lines


def bad_constants(doc: Any, where: str = "") -> list[str]:
    """Every key path (a.b[2].c) whose value is NaN or ±Infinity."""
    if isinstance(doc, NotANumber):
        return [where or "(top level)"]
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in bad_constants(v, f"{where}.{k}" if where else str(k))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in bad_constants(v, f"{where}[{i}]")]
    return []


def _parse(path: Path, text: str, line: int | None = None) -> Any:
    at = f"{path}" + (f", line {line}" if line is not None else "")
    try:
        return json.loads(text, parse_constant=NotANumber)
    except json.JSONDecodeError as e:
        end = " (the file ends early: truncated?)" if e.pos >= len(text.rstrip()) else ""
        raise ImportFileError(f"{at}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}{end}")


def load(path: str | Path, max_bytes: int = MAX_BYTES) -> Loaded:
    """The file parsed as one JSON document, or as JSON Lines when it is not one document but every non-empty
    line is; refused (ImportFileError) when too big or not JSON. NaN and Infinity are kept as NotANumber for
    the reader to refuse by key (Doc.refuse_not_numbers)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        raise ImportFileError(f"{path}: cannot read it: {e.strerror}")
    if size > max_bytes:
        raise ImportFileError(
            f"{path}: {size / 2**20:.1f} MiB is over the import limit of {max_bytes / 2**20:.0f} MiB; "
            "no benchmark result file is that big"
        )
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ImportFileError(f"{path}: not UTF-8 text (byte {e.start}); not a result file")
    if not text.strip():
        raise ImportFileError(f"{path}: the file is empty")
    rows = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
    if len(rows) > 1 and all(line.lstrip().startswith("{") for _, line in rows):
        try:
            json.loads(text, parse_constant=NotANumber)
        except json.JSONDecodeError:  # several objects, one per line: JSON Lines
            return Loaded(path, tuple(_parse(path, line, i) for i, line in rows), data, True)
    return Loaded(path, (_parse(path, text),), data, False)


class Doc:
    """One document of a file with typed lookups that name the file and the key when a value is wrong."""

    def __init__(self, path: Path, data: Mapping[str, Any], where: str = ""):
        self.path = path
        self.data = data
        self.where = where

    def at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, what: str) -> ImportFileError:
        return ImportFileError(f"{self.path}: key '{self.at(key)}' {what}")

    def refuse_not_numbers(self, allow: tuple[str, ...] = ()) -> None:
        """Refuse a NaN or Infinity anywhere in the document but at the keys in `allow`, naming the key."""
        bad = [p for p in bad_constants(self.data, self.where) if p not in {self.at(k) for k in allow}]
        if bad:
            raise ImportFileError(f"{self.path}: key '{bad[0]}' is NaN or Infinity, which no figure can be")

    def mapping(self, key: str) -> dict[str, Any]:
        """An object the reader only looks into for context (a model name, a phase): {} when absent or not one."""
        value = self.data.get(key)
        return value if isinstance(value, dict) else {}

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def number(self, key: str, *, optional: bool = False, minimum: float | None = 0.0) -> float | None:
        """A finite number; negative ones refused where `minimum` is 0 (durations, counts, rates)."""
        value = self.data.get(key)
        if value is None:
            if optional:
                return None
            raise self.fail(key, "is missing")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise self.fail(key, f"should be a number, not {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"is {value}, below {minimum:g}: a time, count or rate cannot be")
        return float(value)

    def text(self, key: str, *, optional: bool = False) -> str | None:
        value = self.data.get(key)
        if value is None:
            if optional:
                return None
            raise self.fail(key, "is missing")
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise self.fail(key, f"should be text, not {type(value).__name__}")
        return str(value)

    def child(self, key: str, *, optional: bool = False) -> Doc | None:
        value = self.data.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, dict):
            raise self.fail(key, "should be an object" + (" and is missing" if value is None else ""))
        return Doc(self.path, value, self.at(key))

    def items(self, key: str) -> list[Doc]:
        """A list of objects, each a Doc named key[i]."""
        value = self.data.get(key)
        if not isinstance(value, list):
            raise self.fail(key, "should be a list" + (" and is missing" if value is None else ""))
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                raise self.fail(f"{key}[{i}]", "should be an object")
            out.append(Doc(self.path, item, f"{self.at(key)}[{i}]"))
        return out

    def numbers(self, key: str, *, optional: bool = False) -> list[float] | None:
        """A list of finite, non-negative numbers (per-request arrays)."""
        value = self.data.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, list):
            raise self.fail(key, "should be a list of numbers")
        out = []
        for i, v in enumerate(value):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise self.fail(f"{key}[{i}]", f"should be a non-negative number, not {v!r}")
            out.append(float(v))
        return out

    def refuse_unknown(
        self, known: frozenset[str] | set[str], tool: str, allow: frozenset[str] = frozenset()
    ) -> None:
        """Every key must be one the tool writes: an unknown one means another tool or version, not a guess."""
        unknown = sorted(k for k in self.data if k not in known and k not in allow)
        if unknown:
            raise self.unknown(unknown[0], tool, len(unknown) - 1)

    def check_keys(self, known: frozenset[str] | set[str], tool: str, keep: list[str] | None) -> None:
        """Refuse a key the tool does not write (refuse_unknown) or, given `keep` (--extra-keys), list each by
        its path there, so an unread key is never dropped silently."""
        if keep is None:
            self.refuse_unknown(known, tool)
        else:
            keep.extend(self.at(k) for k in self.data if k not in known)

    def unknown(self, key: str, tool: str, more: int = 0) -> ImportFileError:
        """The refusal of a key the tool does not write, naming it."""
        also = f" (and {more} more)" if more else ""
        return self.fail(
            key,
            f"is not one {tool} writes{also}: the file is from another tool or a version labkit does not read "
            "(docs/imports.md); pass --extra-keys to keep such keys unread",
        )
