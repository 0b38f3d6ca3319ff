"""What several command groups share: lane subcommands, the variant options and the plan they select."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from labkit.errors import LabkitError
from labkit.recipe import LanePlan, find_recipe, load_recipe


def add_lane_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    help: str,
    func: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """A subcommand that acts on one lane: `labkit NAME RECIPE [--spec S] [--staging S] [-V AXIS=NAME]`."""
    p = sub.add_parser(name, help=help)
    p.add_argument("recipe")
    variant_args(p)
    p.set_defaults(func=func)
    return p


def variant_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", help="speculation variant (e.g. none, dspark)")
    p.add_argument("--staging", help="staging variant (e.g. nas, local-view)")
    p.add_argument(
        "--variant",
        "-V",
        action="append",
        default=[],
        metavar="AXIS=NAME",
        help="any variant axis, repeatable (e.g. -V spec=dspark)",
    )


def variant_choices(args: argparse.Namespace) -> dict[str, str | None]:
    """{axis: name} from --spec/--staging/-V AXIS=NAME."""
    choices: dict[str, str | None] = {"spec": args.spec, "staging": args.staging}
    for item in args.variant:
        axis, sep, name = item.partition("=")
        if not sep or not axis or not name:
            raise LabkitError(f"--variant expects AXIS=NAME, got {item!r}")
        choices[axis] = name
    return choices


def plan_from_args(args: argparse.Namespace) -> LanePlan:
    """The LanePlan for args.recipe with the variants chosen on the command line."""
    recipe = load_recipe(find_recipe(args.recipe))
    choices = {k: v for k, v in variant_choices(args).items() if v is not None}
    # --spec/--staging on a recipe without that axis: only an error when the user set it.
    return recipe.resolve(choices)
