"""Sweep points: `--over KEY=V1,V2,...` specs parsed, expanded into a grid (or zipped), and each point
resolved as one more variant of the recipe, so a typo in a key or a value fails before anything boots.

A point is an overlay on the chosen variants, applied last, under an axis named by the swept key's short
name: sweeping `engine.args."--max-num-batched-tokens"` over 8192 gives the variant id
`spec-none_mnbt-8192`, stored and compared like any lane. Pure: recipes in, LanePlans out.
"""

from __future__ import annotations

import copy
import itertools
import math
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import labkit.recipe.schema as s
from labkit.errors import RecipeError
from labkit.recipe.fields import overlay_fields
from labkit.recipe.load import Recipe, resolve
from labkit.recipe.plan import LanePlan

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_WORD = re.compile(r"[A-Za-z0-9_.:/+-]+")  # a bare string value: fp8, dsv41.stock, repo/image:tag
_NAMED = re.compile(r"^([a-z0-9][a-z0-9-]*):(?!\s*\")(.+)$")  # "ee2:engine.args..." names the axis


@dataclass(frozen=True)
class SweepAxis:
    """One swept key: its path (`("engine", "args", "--max-num-batched-tokens")`), the values in order, the
    short name the variant ids use, and the spec as the user wrote it."""

    key: tuple[str, ...]
    values: tuple[Any, ...]
    short: str
    text: str

    @property
    def dotted(self) -> str:
        return ".".join(p if _BARE.fullmatch(p) and not p.startswith("-") else f'"{p}"' for p in self.key)


def _split_key(text: str, spec: str) -> tuple[str, ...]:
    """`engine.args."--max-num-batched-tokens"` → ("engine", "args", "--max-num-batched-tokens")."""
    parts, i = [], 0
    while i < len(text):
        if text[i] == '"':
            end = text.find('"', i + 1)
            if end < 0:
                raise RecipeError("--over", spec, "unclosed quote in the key")
            parts.append(text[i + 1 : end])
            i = end + 1
        else:
            end = text.find(".", i)
            end = len(text) if end < 0 else end
            parts.append(text[i:end].strip())
            i = end
        if i < len(text):
            if text[i] != ".":
                raise RecipeError("--over", spec, f"expected '.' after {parts[-1]!r} in the key")
            i += 1
    if not parts or any(not p for p in parts):
        raise RecipeError("--over", spec, "the key is empty or has an empty part")
    return tuple(parts)


def _value(text: str, spec: str) -> Any:
    """A TOML value (8192, 0.5, true, "x"); a bare word that is not TOML is taken as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        if _WORD.fullmatch(text):
            return text
        raise RecipeError("--over", spec, f"{text!r} is not a value (quote strings with spaces)")


def short_name(key: Sequence[str]) -> str:
    """What a point's variant id calls the key: a flag's initials ("--max-num-batched-tokens" → "mnbt"),
    else the last part ("prefill_chunk_tokens" → "prefill-chunk-tokens")."""
    last = key[-1]
    if last.startswith("-"):
        words = [w for w in re.split(r"[-_]+", last) if w]
        return "".join(w[0] for w in words).lower() or "arg"
    return re.sub(r"[^A-Za-z0-9-]+", "-", last).strip("-").lower() or "key"


def parse_over(spec: str) -> SweepAxis:
    """`[NAME:]KEY=V1,V2,...` as a SweepAxis (NAME: the short name the variant ids use, instead of the
    key's); RecipeError naming the spec on any problem."""
    key_text, sep, values_text = spec.partition("=")
    if not sep or not values_text.strip():
        raise RecipeError(
            "--over", spec, 'expected KEY=V1,V2,... (e.g. engine.args."--max-num-batched-tokens"=4096,8192)'
        )
    named = _NAMED.match(key_text.strip())
    key = _split_key(named.group(2) if named else key_text.strip(), spec)
    values = tuple(_value(v.strip(), spec) for v in values_text.split(","))
    for v in values:
        if isinstance(v, float) and not math.isfinite(v):
            raise RecipeError("--over", spec, f"{v} is not a finite number")
        if isinstance(v, bool) and key[:2] == ("engine", "args"):
            raise RecipeError(
                "--over",
                spec,
                "true/false under engine.args become a bare flag and no flag at all, so the false point would "
                'measure the engine\'s default; sweep the flag\'s value as a string ("true","false") if it '
                "takes one, or measure the two settings as separate variants",
            )
    return SweepAxis(key, values, named.group(1) if named else short_name(key), spec)


def expand(axes: Sequence[SweepAxis], zipped: bool = False) -> list[tuple[tuple[SweepAxis, Any], ...]]:
    """The points: every combination (a grid), or with `zipped` the i-th value of every axis together; a
    point that comes twice is an error (a grid axis with a repeated value, or two equal zipped tuples)."""
    if zipped:
        counts = {len(a.values) for a in axes}
        if len(counts) > 1:
            raise RecipeError("--over", axes[0].text, "--zip needs the same number of values on every --over")
        points = [tuple((a, a.values[i]) for a in axes) for i in range(counts.pop() if counts else 0)]
    else:
        points = [
            tuple(zip(axes, combo, strict=True)) for combo in itertools.product(*(a.values for a in axes))
        ]
    seen: set[str] = set()
    for point in points:
        key = repr([v for _, v in point])
        if key in seen:
            shown = ", ".join(f"{a.short}={v!r}" for a, v in point)
            raise RecipeError("--over", point[0][0].text, f"the point {shown} comes twice")
        seen.add(key)
    return points


def _nest(key: Sequence[str], value: Any) -> dict:
    out: Any = value
    for part in reversed(key):
        out = {part: out}
    return out


def _name(value: Any) -> str:
    """A value as the variant name of its point: 8192, 0.5, true, neg1 for -1, repo-image-tag."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and text.startswith("-"):
        text = "neg" + text[1:]
    return re.sub(r"[^A-Za-z0-9.-]+", "-", text).strip("-") or "x"


def resolve_point(
    recipe: Recipe, choices: Mapping[str, str | None], point: Sequence[tuple[SweepAxis, Any]]
) -> LanePlan:
    """The LanePlan of one point: the chosen variants, then one axis per swept key whose variant is the
    point's value (an overlay checked like a variant's: unknown keys and bad values name the key)."""
    data = copy.deepcopy(recipe.data)
    picked = dict(choices)
    for axis, value in point:
        if axis.short in data["variants"]:
            raise RecipeError(
                str(recipe.file), f"variants.{axis.short}", "the recipe has an axis of the sweep's name"
            )
        try:
            overlay = s.table(overlay_fields(), partial=True)(_nest(axis.key, value), "")
        except s.Invalid as e:
            raise RecipeError(str(recipe.file), f"--over {e.key}", e.message)
        data["variants"][axis.short] = {_name(value): overlay}
        picked[axis.short] = _name(value)
    return resolve(Recipe(recipe.name, recipe.file, data), picked)
