"""Variants: which overlay each axis picks, and the base recipe with those overlays applied.

A variant is a partial recipe under `[variants.<axis>.<name>]`; overlays apply in the recipe's axis order,
engine args flag by flag (`remove_args` drops flags), `staging` as a whole, other tables key by key (arrays
such as `engine.docker.mounts` are replaced whole).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

import labkit.recipe.schema as s
from labkit.errors import RecipeError
from labkit.recipe.fields import recipe_fields


def default_variant(data: dict, axis: str) -> str:
    """The variant an axis takes when none is chosen: lane.defaults, else the axis's first."""
    return data["lane"]["defaults"].get(axis) or next(iter(data["variants"][axis]))


def pick(data: dict, choices: Mapping[str, str | None], recipe: str, shown: str) -> dict[str, str]:
    """{axis: variant} for every axis in recipe `recipe`'s order; RecipeError for an unknown axis or variant."""
    picked: dict[str, str] = {}
    for axis, name in choices.items():
        if name is None:
            continue
        if axis not in data["variants"]:
            have = ", ".join(data["variants"]) or "none"
            raise RecipeError(
                shown,
                "variants",
                f"recipe {recipe} has no variant axis '{axis}'"
                f"{s.suggest(axis, data['variants'])}; axes: {have}",
            )
        if name not in data["variants"][axis]:
            names = data["variants"][axis]
            raise RecipeError(
                shown,
                f"variants.{axis}",
                f"no variant '{name}'{s.suggest(name, names)}; {axis} variants: {', '.join(names)}",
            )
        picked[axis] = name
    return {axis: picked.get(axis) or default_variant(data, axis) for axis in data["variants"]}


def check_defaults(data: dict) -> None:
    """Every lane.defaults entry names an existing axis and variant."""
    for axis, name in data["lane"]["defaults"].items():
        path = f"lane.defaults.{axis}"
        if axis not in data["variants"]:
            raise s.Invalid(path, f"no variant axis '{axis}'{s.suggest(axis, data['variants'])}")
        if name not in data["variants"][axis]:
            names = data["variants"][axis]
            raise s.Invalid(
                path, f"no variant '{name}' on axis '{axis}'{s.suggest(name, names)}; have {', '.join(names)}"
            )


def merge(data: dict, choices: dict[str, str]) -> dict:
    """Apply the chosen overlays, in axis order, to a deep copy of the base recipe."""
    merged = {k: copy.deepcopy(v) for k, v in data.items() if k != "variants"}
    for axis, name in choices.items():
        overlay = data["variants"][axis][name]
        where = f"variants.{axis}.{name}"
        for key, value in overlay.items():
            if key in ("label", "description"):
                merged["lane"][key] = value
            elif key == "staging":
                merged["staging"] = copy.deepcopy(value)
            elif key == "engine":
                _merge_engine(merged["engine"], value, f"{where}.engine")
            else:
                _deep_update(merged[key], value)
    # Fill defaults of partially given sub-tables (an overlay may have added keys only).
    return s.table(recipe_fields(partial=False))(merged, "")


def _merge_engine(engine: dict, overlay: dict, where: str) -> None:
    for key, value in overlay.items():
        if key == "args":
            engine["args"].update(copy.deepcopy(value))
        elif key == "remove_args":
            for i, flag in enumerate(value):
                if flag not in engine["args"]:
                    raise s.Invalid(
                        f"{where}.remove_args[{i}]",
                        f"flag {flag} is not in engine.args{s.suggest(flag, engine['args'])}",
                    )
                del engine["args"][flag]
        elif key in ("env", "parallel"):
            engine[key].update(copy.deepcopy(value))
        elif key == "docker":
            _deep_update(engine["docker"], value)
        else:
            engine[key] = copy.deepcopy(value)


def _deep_update(base: dict, overlay: dict) -> None:
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
