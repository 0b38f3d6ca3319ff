"""`labkit sweep RECIPE --over KEY=V1,V2,...`: boot, measure and store one lane per point, then print the
sweep table and write its plot (docs/sweeps.md). Exit 1 when a point failed (the others are still stored)."""

from __future__ import annotations

import argparse
import sys

from labkit.cli.common import variant_args, variant_choices
from labkit.errors import LabkitError


def cmd_sweep(args: argparse.Namespace) -> int:
    from labkit import lab, report

    choices = {k: v for k, v in variant_choices(args).items() if v is not None}
    spec, staging = choices.pop("spec", None), choices.pop("staging", None)
    kw = dict(spec=spec, staging=staging, variants=choices, zipped=args.zip, name=args.name, runs=args.runs)
    if args.dry_run:
        sp = lab.sweep_plan(args.recipe, args.over, **kw)
        print(lab.describe_sweep(sp))
        print(lab.estimate_sweep(sp, args.results))
        return 0
    allowed = allowed_env(args.allow_env or [], args.reason or [])
    sw = lab.sweep(args.recipe, args.over, fresh=args.fresh, results=args.results, allowed_env=allowed, **kw)
    for table in lab.sweep_tables(sw):
        print(report.to_text(table), end="\n\n")
    plot = lab.save_sweep_figure(sw)
    if plot is not None:
        print(f"plot: {plot}")
    print(f"sweep record: {sw.path}")
    for point in sw.failed:
        print(f"labkit: point {point.variant_id} failed: {point.reason}", file=sys.stderr)
    return 1 if sw.failed else 0


def allowed_env(names: list[str], reasons: list[str]) -> dict[str, str]:
    """{name: reason} from the paired --allow-env and --reason options; each name needs its reason."""
    if len(names) != len(reasons) or not all(r.strip() for r in reasons):
        raise LabkitError(
            f"--allow-env: {len(names)} name(s) and {len(reasons)} --reason(s): give each --allow-env NAME its "
            "--reason TEXT (why the sweep should run a variable the engine's code never mentions)"
        )
    return dict(zip(names, reasons, strict=True))


def add_sweep(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep",
        help="walk a recipe key (engine flag, env, measure setting) across values: one stored lane per point",
    )
    p.add_argument("recipe")
    variant_args(p)
    p.add_argument(
        "--over",
        action="append",
        required=True,
        metavar="KEY=V1,V2,...",
        help='a recipe key and its values, e.g. engine.args."--max-num-batched-tokens"=4096,8192 (quote the '
        "flag); several --over make a grid",
    )
    p.add_argument(
        "--zip", action="store_true", help="pair the i-th values of every --over instead of a grid"
    )
    p.add_argument(
        "--fresh",
        action="store_true",
        help="measure every point anew instead of resuming (stored runs stay; the sweep record lists the new)",
    )
    p.add_argument("--name", help="sweep record name (default <base variant id>_over_<swept short names>)")
    p.add_argument(
        "--runs", type=int, default=None, metavar="N", help="runs per point (default measure.runs)"
    )
    p.add_argument("--dry-run", action="store_true", help="list the points and boots, boot nothing")
    p.add_argument(
        "--allow-env",
        action="append",
        metavar="NAME",
        help="run an engine-named environment variable the engine's code never mentions (with --reason)",
    )
    p.add_argument("--reason", action="append", metavar="TEXT", help="why, for the --allow-env before it")
    p.add_argument("--results", metavar="DIR", help="results folder (default $LABKIT_RESULTS or results/)")
    p.set_defaults(func=cmd_sweep)
