"""Parsing and formatting of byte sizes as people write them in recipes ("10G", "101.5 GB")."""

from __future__ import annotations

import re

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "kib": 2**10,
    "m": 10**6,
    "mb": 10**6,
    "mib": 2**20,
    "g": 10**9,
    "gb": 10**9,
    "gib": 2**30,
    "t": 10**12,
    "tb": 10**12,
    "tib": 2**40,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes from "10G", "190 GB", "101.5GB", "64MiB" or a plain integer.

    Decimal units (G = GB = 10**9) as `df -H` and the lab note use them; binary with an explicit "iB".
    Raises ValueError with the accepted forms on anything else.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a size like '10G', got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must not be negative, got {text}")
        return text
    m = _SIZE_RE.match(str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise ValueError(f"expected a size like '10G', '190 GB', '101.5GB' or '64MiB', got {text!r}")
    return int(round(float(m.group(1)) * _UNITS[unit]))


def format_size(n: int | float) -> str:
    """Human size with decimal units, e.g. 101500000000 -> '101.5 GB'."""
    sign = "-" if n < 0 else ""
    n = abs(float(n))
    for unit, factor in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= factor:
            return f"{sign}{n / factor:.1f} {unit}"
    return f"{sign}{int(n)} B"
