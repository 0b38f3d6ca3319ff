"""A small strict validator for TOML tables: unknown keys are errors, with the closest name suggested.

Kept apart from fields.py so the recipe format reads as the format, not as validation plumbing.
Each checker takes (value, key_path) and returns the normalised value or raises `Invalid`.
"""

from __future__ import annotations

import difflib
import math
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from labkit.units import parse_size

Checker = Callable[[Any, str], Any]


class Invalid(Exception):
    """A value failed validation at `key` (dotted path); load.py turns it into a RecipeError."""

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


def suggest(name: str, choices) -> str:
    """' (did you mean 'x'?)' for the closest choice, or '' when nothing is close."""
    close = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _type_name(value: Any) -> str:
    return {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "a table",
    }.get(type(value), type(value).__name__)


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


@dataclass(frozen=True)
class Field:
    check: Checker
    required: bool = False
    default: Any = None


def table(fields: dict[str, Field], partial: bool = False) -> Checker:
    """A TOML table with exactly these keys; `partial` skips required keys and defaults (overlays)."""

    def check(value: Any, path: str) -> dict:
        if not isinstance(value, dict):
            raise Invalid(path, f"expected a table, got {_type_name(value)}")
        out = {}
        for key, item in value.items():
            if key not in fields:
                known = ", ".join(fields)
                raise Invalid(join(path, key), f"unknown key{suggest(key, fields)}; known keys here: {known}")
            # TOML has no null: None only comes from defaults filled in by an earlier pass.
            out[key] = None if item is None else fields[key].check(item, join(path, key))
        if not partial:
            for key, spec in fields.items():
                if key in out:
                    continue
                if spec.required:
                    raise Invalid(join(path, key), "required key is missing")
                value = spec.default() if callable(spec.default) else spec.default
                # A missing sub-table still gets its own defaults filled in.
                out[key] = spec.check(value, join(path, key)) if value == {} else value
        return out

    return check


def string(nonempty: bool = True) -> Checker:
    def check(value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise Invalid(path, f"expected a string, got {_type_name(value)}")
        if nonempty and not value.strip():
            raise Invalid(path, "must not be empty")
        return value

    return check


def integer(minimum: int = 1, maximum: int | None = None) -> Checker:
    def check(value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(path, f"expected an integer, got {_type_name(value)}")
        if value < minimum or (maximum is not None and value > maximum):
            upper = f" and <= {maximum}" if maximum is not None else ""
            raise Invalid(path, f"expected an integer >= {minimum}{upper}, got {value}")
        return value

    return check


def number(minimum: float = 0.0) -> Checker:
    def check(value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Invalid(path, f"expected a number, got {_type_name(value)}")
        if value < minimum:
            raise Invalid(path, f"expected a number >= {minimum}, got {value}")
        return float(value)

    return check


def bounded(low: float, high: float, *, low_closed: bool = False, high_open: bool = False) -> Checker:
    """A finite number above `low` (or at it, `low_closed`) and at most `high` (below it, `high_open`); NaN and
    the infinities, which TOML spells `nan` and `inf`, are refused like any other number out of range."""
    below = f"{'>=' if low_closed else '>'} {low:g}"
    above = f"{'<' if high_open else '<='} {high:g}"

    def check(value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise Invalid(path, f"expected a number, got {type(value).__name__}")
        ok = (
            math.isfinite(value)
            and (value >= low if low_closed else value > low)
            and (value < high if high_open else value <= high)
        )
        if not ok:
            raise Invalid(path, f"expected a finite number {below} and {above}, got {value!r}")
        return float(value)

    return check


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise Invalid(path, f"expected true or false, got {_type_name(value)}")
    return value


def choice(*options: str) -> Checker:
    def check(value: Any, path: str) -> str:
        if value not in options:
            raise Invalid(
                path, f"expected one of {', '.join(options)}, got {value!r}{suggest(value, options)}"
            )
        return value

    return check


def array(item: Checker, nonempty: bool = False, unique: bool = False) -> Checker:
    def check(value: Any, path: str) -> list:
        if not isinstance(value, list):
            raise Invalid(path, f"expected an array, got {_type_name(value)}")
        if nonempty and not value:
            raise Invalid(path, "must not be empty")
        out = [item(v, join(path, i)) for i, v in enumerate(value)]
        if unique:
            seen = set()
            for i, v in enumerate(out):
                if v in seen:
                    raise Invalid(join(path, i), f"duplicate entry {v!r}")
                seen.add(v)
        return out

    return check


def mapping(value_check: Checker) -> Checker:
    """A table with free-form keys (engine args, env)."""

    def check(value: Any, path: str) -> dict:
        if not isinstance(value, dict):
            raise Invalid(path, f"expected a table, got {_type_name(value)}")
        return {k: value_check(v, join(path, k)) for k, v in value.items()}

    return check


def size(value: Any, path: str) -> int:
    try:
        return parse_size(value)
    except ValueError as e:
        raise Invalid(path, str(e))


def absolute_path(value: Any, path: str) -> str:
    """An absolute POSIX path with no '..' component (paths are sent to remote nodes)."""
    text = string()(value, path)
    if not text.startswith("/"):
        raise Invalid(path, f"expected an absolute path, got {text!r}")
    if ".." in text.split("/"):
        raise Invalid(path, f"must not contain '..', got {text!r}")
    if "\0" in text or "\n" in text:
        raise Invalid(path, "must not contain NUL or newline characters")
    return posixpath.normpath(text)


def file_name(value: Any, path: str) -> str:
    """A bare file name: no path separators, not '.' or '..' (shard names inside a view)."""
    text = string()(value, path)
    if "/" in text or "\\" in text or text in (".", "..") or "\0" in text or "\n" in text:
        raise Invalid(path, f"expected a bare file name without path separators, got {text!r}")
    return text


def read_toml(file, error: Callable[[str], Exception]) -> dict:
    """Parse a TOML file; a missing file or a syntax error (with line and column) raises `error(message)`,
    the message naming the file."""
    import tomllib
    from pathlib import Path

    file = Path(file)
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{file}: file not found")
    except tomllib.TOMLDecodeError as e:
        raise error(f"{file}: TOML syntax error: {e}")
