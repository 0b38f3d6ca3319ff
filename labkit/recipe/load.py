"""Recipes: `recipes/<name>/recipe.toml` read, validated and resolved, with named variants applied, into one
immutable LanePlan.

A recipe is a declarative lane: model, engine, cluster, staging, measurement plan and named variants
grouped by axis (`spec = dspark`, `staging = local-view`, ...). Resolution is pure: it reads TOML and
returns dataclasses; nothing here touches a node.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import labkit.recipe.schema as s
from labkit.errors import RecipeError
from labkit.recipe.build import build_plan
from labkit.recipe.fields import top_fields
from labkit.recipe.plan import LanePlan
from labkit.recipe.rules import check_whole
from labkit.recipe.variants import check_defaults, default_variant, merge, pick

RECIPE_FILE = "recipe.toml"


@dataclass(frozen=True)
class Recipe:
    """A validated recipe file before a variant choice; `resolve` turns it into a LanePlan."""

    name: str
    file: Path
    data: dict  # validated, defaults filled

    @property
    def aliases(self) -> list[str]:
        return list(self.data["lane"]["aliases"])

    @property
    def axes(self) -> dict[str, list[str]]:
        return {axis: list(names) for axis, names in self.data["variants"].items()}

    def default_variant(self, axis: str) -> str:
        return default_variant(self.data, axis)

    @property
    def note(self) -> Path:
        return self.file.parent / "NOTE.md"

    def resolve(self, choices: Mapping[str, str | None] | None = None) -> LanePlan:
        return resolve(self, choices or {})


def load_recipe(path: str | Path) -> Recipe:
    """Read and validate one recipe file (or folder). Raises RecipeError naming the file and key."""
    path = Path(path)
    file = path / RECIPE_FILE if path.is_dir() else path
    shown = _shown(file)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RecipeError(shown, "", "file not found")
    except UnicodeDecodeError as e:
        raise RecipeError(shown, "", f"not UTF-8 text ({e.reason} at byte {e.start})")
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise RecipeError(shown, "", f"TOML syntax error: {e}")
    try:
        data = s.table(top_fields())(raw, "")
        check_defaults(data)
        defaults = {a: default_variant(data, a) for a in data["variants"]}
    except s.Invalid as e:
        raise RecipeError(shown, e.key, e.message)
    # Every variant must resolve on its own: a broken overlay fails `labkit check`, not a later run.
    combos = [defaults] + [
        {**defaults, axis: name}
        for axis, names in data["variants"].items()
        for name in names
        if name != defaults[axis]
    ]
    for combo in combos:
        try:
            check_whole(merge(data, combo))
        except s.Invalid as e:
            which = ", ".join(f"{a}={n}" for a, n in combo.items())
            raise RecipeError(shown, e.key, e.message + (f" (with variants {which})" if which else ""))
    return Recipe(name=file.parent.name, file=file, data=data)


def _shown(file: Path) -> str:
    try:
        return str(file.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(file)


def resolve(recipe: Recipe, choices: Mapping[str, str | None]) -> LanePlan:
    """The LanePlan for a variant choice ({axis: name}); unchosen axes take their default."""
    data = recipe.data
    shown = _shown(recipe.file)
    ordered = pick(data, choices, recipe.name, shown)
    try:
        merged = merge(data, ordered)
        check_whole(merged)
    except s.Invalid as e:
        raise RecipeError(shown, e.key, e.message)
    return build_plan(recipe.name, shown, ordered, merged)
