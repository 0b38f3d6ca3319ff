"""Finding recipes: where they live, by folder name, alias or prefix, and `load_plan` to go from a name to a
LanePlan in one call."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import labkit.recipe.schema as s
from labkit import settings
from labkit.errors import LabkitError, RecipeError
from labkit.recipe.load import RECIPE_FILE, load_recipe
from labkit.recipe.plan import LanePlan


def repo_root() -> Path:
    """The checkout labkit runs from, the installed one (its code, notebooks/ and, by default, its recipes/ and
    results/)."""
    return Path(__file__).resolve().parents[2]


def is_checkout(folder: Path) -> bool:
    """A labkit checkout: it holds recipes/ and labkit's own pyproject.toml (project name "labkit")."""
    project = folder / "pyproject.toml"
    if not (folder / "recipes").is_dir() or not project.is_file():
        return False
    try:
        return tomllib.loads(project.read_text()).get("project", {}).get("name") == "labkit"
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False


def checkout(start: Path | None = None) -> Path:
    """The checkout whose recipes/ and results/ a command uses: the nearest of the working directory (or
    `start`) and its parents that is one (a clone the user works in), else the installed one."""
    here = (start or Path.cwd()).resolve()
    return next((f for f in (here, *here.parents) if is_checkout(f)), repo_root())


def checkout_note(start: Path | None = None) -> str | None:
    """One line for stderr when recipes or results come from another checkout than the installed one (None
    when they do not, or both are set by $LABKIT_RECIPES and $LABKIT_RESULTS)."""
    current = settings.current()
    found = checkout(start)
    if found == repo_root() or (current.recipes and current.results):
        return None
    return (
        f"labkit: recipes and results of the checkout at {found} (the working directory's), not {repo_root()}"
    )


def recipes_dir() -> Path:
    """Where recipes are found: $LABKIT_RECIPES, else the working directory's checkout's recipes/, else the
    installed checkout's."""
    env = settings.current().recipes
    return Path(env) if env else checkout() / "recipes"


def list_recipes(root: Path | None = None) -> list[Path]:
    root = root or recipes_dir()
    if not root.is_dir():
        return []
    return sorted(p.parent for p in root.glob(f"*/{RECIPE_FILE}"))


def find_recipe(name: str, root: Path | None = None) -> Path:
    """A recipe folder by folder name, alias, unique prefix, or a path to a folder/recipe.toml."""
    root = root or recipes_dir()
    given = Path(name).expanduser()
    if given.is_file() and given.suffix == ".toml":
        return given.parent
    if (given / RECIPE_FILE).is_file() and (os.sep in name or name.startswith(".")):
        return given
    folders = list_recipes(root)
    by_name = {p.name: p for p in folders}
    if name in by_name:
        return by_name[name]
    aliases: dict[str, list[Path]] = {}
    for folder in folders:
        try:
            raw = tomllib.loads((folder / RECIPE_FILE).read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError):
            continue
        lane = raw.get("lane", {})
        for alias in lane.get("aliases", []) if isinstance(lane, dict) else []:
            if isinstance(alias, str):
                aliases.setdefault(alias, []).append(folder)
    if name in aliases:
        claimed = aliases[name]
        if len(claimed) > 1:  # a copied recipe keeps its original's aliases: never pick one silently
            files = ", ".join(str(f / RECIPE_FILE) for f in claimed)
            raise RecipeError(
                str(claimed[-1] / RECIPE_FILE),
                "lane.aliases",
                f"alias '{name}' is claimed by {len(claimed)} recipes ({files}): remove or rename it in all but one",
            )
        return claimed[0]
    prefixed = [p for p in folders if p.name.startswith(name)]
    if len(prefixed) == 1:
        return prefixed[0]
    known = sorted(by_name) + sorted(aliases)
    if len(prefixed) > 1:
        raise RecipeError(
            str(root), "", f"recipe '{name}' is ambiguous: {', '.join(p.name for p in prefixed)}"
        )
    hint = s.suggest(name, known)
    raise RecipeError(str(root), "", f"no recipe '{name}'{hint}; known: {', '.join(known) or 'none'}")


def recipe_named(name: str) -> str | None:
    """The name of the recipe `name` finds (folder name, alias, unique prefix), None when it finds none or the
    recipe does not load: a lane name that must not stand for a recipe is checked with it."""
    try:
        return load_recipe(find_recipe(name)).name
    except LabkitError:
        return None


def alias_clashes(recipes: list[tuple[str, Path, tuple[str, ...]]]) -> list[str]:
    """Aliases that name more than one recipe, or another recipe's folder: (name, file, aliases) of each."""
    names = {name for name, _, _ in recipes}
    owners: dict[str, list[tuple[str, Path]]] = {}
    for name, file, aliases in recipes:
        for alias in aliases:
            owners.setdefault(alias, []).append((name, file))
    out = []
    for alias, claimed in sorted(owners.items()):
        if len(claimed) > 1:
            out.append(
                f"{claimed[-1][1]}: lane.aliases: '{alias}' is also an alias of "
                + ", ".join(n for n, _ in claimed[:-1])
                + " (a copied recipe keeps its original's aliases: rename or remove it)"
            )
        if alias in names and all(n != alias for n, _ in claimed):
            out.append(f"{claimed[0][1]}: lane.aliases: '{alias}' is the folder name of another recipe")
    return out


def load_plan(name: str, root: Path | None = None, **choices: str | None) -> LanePlan:
    """Find, load and resolve in one call: `load_plan("dsv41", spec="dspark")`."""
    return load_recipe(find_recipe(name, root)).resolve(choices)
