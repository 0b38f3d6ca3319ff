"""`labkit run`: execute a notebook template with papermill (labkit.notebooks does the work) and show its
tables as text in the terminal (docs/measurement.md, "Tables in the terminal")."""

from __future__ import annotations

import argparse
import sys


def cmd_run(args: argparse.Namespace) -> int:
    import logging

    from labkit.notebooks import TerminalView, execute, guess_value, shown_tables

    params = {}
    for name, value in args.param:
        params[name] = guess_value(value)
    for name, value in args.raw_param:
        params[name] = value
    # Not on a terminal (or with --log-cells), papermill logs every cell output (text/plain, so tables as text)
    # to stderr as the cells run. On a terminal the lab's own progress shows instead: its stage lines and live
    # bars (notebooks.TerminalView), and the tables are printed once it is done.
    logged = args.log_cells or not sys.stderr.isatty()
    if logged:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    view = None if logged else TerminalView(sys.stderr)
    out = execute(
        args.notebook,
        params,
        args.output,
        log_output=logged,
        execution_timeout=args.execution_timeout,
        view=view,
    )
    if not logged:
        for text in shown_tables(out):
            print(text, end="\n\n")
    print(f"executed notebook: {out}")
    return 0


def add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument(
        "--log-cells",
        action="store_true",
        help="log every cell's output as papermill does (the default off a terminal); on a terminal the lab's "
        "stage lines and live progress bars show instead",
    )
    p.set_defaults(func=cmd_run)
