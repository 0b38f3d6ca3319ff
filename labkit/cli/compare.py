"""`labkit compare A B`: the difference, its 95 % interval, a test and a verdict per measure (and per load
level, with the capacities), behind the comparability gate; `--fail-on-regression PCT` makes it a CI check."""

from __future__ import annotations

import argparse
import json
import sys


def cmd_compare(args: argparse.Namespace) -> int:
    from labkit import lab, report

    measures = [m for part in args.measure or () for m in part.split(",") if m]
    c = lab.compare(
        args.a,
        args.b,
        measures=measures or None,
        results=args.results,
        margin=args.margin,
        force=args.force,
        recorded=args.recorded,
    )
    if args.json:
        print(json.dumps(c.to_dict(), indent=1, default=str))
    else:
        sys.stdout.write(report.compare_text(c))
    if args.fail_on_regression is not None:
        bad = c.regressions(args.fail_on_regression)
        for r in bad:
            holm = f", Holm-adjusted over {r.family} measures {r.p_adj:.2g}" if r.family > 1 else ""
            print(
                f"labkit: regression: {r.measure} {r.rel * 100:+.2f} % (B {r.verdict} than A beyond "
                f"{args.fail_on_regression:g} %, p = {r.p:.2g}{holm})",
                file=sys.stderr,
            )
        return 1 if bad else 0
    return 0


def add_compare(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare", help="compare two lanes or run sets of stored runs, with a verdict per measure"
    )
    p.add_argument(
        "a", metavar="A", help="baseline: RECIPE, RECIPE/VARIANT_ID, RECIPE@axis=name,... or run ids a,b,c"
    )
    p.add_argument("b", metavar="B", help="candidate, in the same forms")
    p.add_argument(
        "--measure",
        action="append",
        metavar="NAME",
        help="measure(s) to compare (repeat or comma-separate); a load figure without its level "
        "(load_ttft@stat=p99) at every shared level; default the headline ones both sides have, and with load "
        "runs TTFT p50/p99, TPOT p50, output t/s, goodput and attainment per level and the capacities",
    )
    p.add_argument(
        "--margin",
        type=float,
        default=None,
        metavar="FRACTION",
        help="equivalence margin relative to A's mean (default 0.02)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="compare even when the gate blocks (simulated vs real, different plans)",
    )
    p.add_argument(
        "--recorded",
        action="store_true",
        help="use a lane's recorded figures (the lab note's) where it has measured runs too; by default its "
        "measured runs, never both",
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument(
        "--fail-on-regression",
        type=float,
        default=None,
        metavar="PCT",
        help="exit 1 when a measure of B is significantly slower than A by more than PCT percent "
        "(significant after the Holm correction across the compared measures)",
    )
    p.add_argument("--results", metavar="DIR", help="results folder (default $LABKIT_RESULTS or results/)")
    p.set_defaults(func=cmd_compare)
