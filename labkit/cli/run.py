"""`labkit run`: execute a notebook template with papermill (labkit.notebooks does the work)."""

from __future__ import annotations

import argparse
import sys


def cmd_run(args: argparse.Namespace) -> int:
    import logging

    from labkit.notebooks import execute, guess_value

    params = {}
    for name, value in args.param:
        params[name] = guess_value(value)
    for name, value in args.raw_param:
        params[name] = value
    if not sys.stderr.isatty():
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    out = execute(args.notebook, params, args.output, execution_timeout=args.execution_timeout)
    print(f"executed notebook: {out}")
    return 0


def add_run(sub) -> None:
    p = sub.add_parser(
        "run", help="execute a notebook template with papermill (e.g. labkit run bench -p recipe sim)"
    )
    p.add_argument("notebook", help="template name in notebooks/ (bench, compare) or a path")
    p.add_argument(
        "-p",
        "--param",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="parameter; True/False/None/ints/floats converted only when they read back identically",
    )
    p.add_argument(
        "-r",
        "--raw-param",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="parameter passed as a string",
    )
    p.add_argument("-o", "--output", help="executed notebook path (default out/<name>-<UTC stamp>.ipynb)")
    p.add_argument("--execution-timeout", type=float, default=None, metavar="S", help="per-cell timeout")
    p.set_defaults(func=cmd_run)
