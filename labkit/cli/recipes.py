"""`labkit recipes`, `labkit show`, `labkit check`: what the recipes are and what a lane would run."""

from __future__ import annotations

import argparse
import json
import sys

from labkit.cli.common import add_lane_command, plan_from_args
from labkit.errors import LabkitError
from labkit.recipe import alias_clashes, find_recipe, lane_warnings, list_recipes, load_recipe


def cmd_recipes(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    rows = []
    for folder in list_recipes():
        try:
            r = load_recipe(folder)
        except LabkitError as e:
            rows.append([folder.name, "", "", "", f"INVALID: {e}"])
            continue
        axes = "; ".join(f"{a}: {'|'.join(n)}" for a, n in r.axes.items())
        eng = r.data["engine"]
        rows.append(
            [
                r.name,
                ", ".join(r.aliases),
                f"{eng['kind']} x{len(r.data['cluster']['nodes'])}",
                axes,
                r.data["lane"]["label"] or "",
            ]
        )
    print(tabulate(rows, headers=["recipe", "aliases", "engine", "variants", "label"]))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from labkit import lab
    from labkit.store import load_results

    plan = plan_from_args(args)
    if args.json:
        print(json.dumps({**plan.to_dict(), "commands": lab.commands(plan)}, indent=2))
    else:
        print(lab.describe(plan))
        stored = load_results()  # read once: the estimate and the roofline both look up the lane's runs
        print(lab.estimate(plan, data=stored).line())
        print(lab.roofline(plan, data=stored))
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    folders = [find_recipe(n) for n in args.recipes] if args.recipes else list_recipes()
    if not folders:
        print("no recipes found", file=sys.stderr)
        return 1
    failed = 0
    loaded = []
    for folder in folders:
        try:
            r = load_recipe(folder)
        except LabkitError as e:
            failed += 1
            print(f"FAIL {folder.name}: {e}")
            continue
        loaded.append((r.name, r.file, tuple(r.aliases)))
        combos = sum(len(n) for n in r.axes.values()) or 1
        note = "" if r.note.is_file() else "  (warning: no NOTE.md)"
        print(f"ok   {r.name} ({combos} variants){note}")
        for warning in lane_warnings(r.resolve({})):
            print(f"     WARNING: {warning}")
    if not args.recipes:  # names are shared by all recipes: checked across them
        clashes = alias_clashes(loaded)
        for clash in clashes:
            print(f"FAIL {clash}")
        failed += len(clashes)
    return 1 if failed else 0


def add_recipes(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("recipes", help="list recipes, aliases and variants")
    p.set_defaults(func=cmd_recipes)


def add_show(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_lane_command(sub, "show", "print the resolved lane plan", cmd_show)
    p.add_argument("--json", action="store_true", help="machine-readable plan")


def add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("check", help="validate recipes (all when none named); non-zero exit on any error")
    p.add_argument("recipes", nargs="*")
    p.set_defaults(func=cmd_check)
