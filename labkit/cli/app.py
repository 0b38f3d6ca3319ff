"""The `labkit` command: the parser assembled from the command groups, and the error handling every
subcommand shares (a LabkitError is one line on stderr and exit 1, Ctrl-C is exit 130)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from labkit import __version__
from labkit.cli.bench import add_bench
from labkit.cli.compare import add_compare
from labkit.cli.doctor import add_doctor
from labkit.cli.exchange import add_export, add_import
from labkit.cli.recipes import add_check, add_recipes, add_show
from labkit.cli.report import add_import_note, add_report
from labkit.cli.run import add_run
from labkit.cli.serve import add_down, add_logs, add_status, add_up
from labkit.cli.sim import add_sim
from labkit.cli.stage import add_stage
from labkit.cli.sweep import add_sweep
from labkit.cli.tinymodel import add_tiny_model
from labkit.errors import LabkitError

# Each adds its subcommand to the subparsers, in the order `labkit --help` lists them.
SUBCOMMANDS: tuple[Callable[[Any], None], ...] = (
    add_recipes,
    add_show,
    add_up,
    add_down,
    add_status,
    add_logs,
    add_doctor,
    add_stage,
    add_bench,
    add_tiny_model,
    add_check,
    add_report,
    add_compare,
    add_sweep,
    add_import_note,
    add_import,
    add_export,
    add_run,
    add_sim,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labkit", description="Measure LLM serving lanes reproducibly.")
    parser.add_argument("--version", action="version", version=f"labkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    from labkit.recipe import checkout_note

    note = checkout_note()  # recipes and results from a clone the user works in, not the installed checkout
    if note:
        print(note, file=sys.stderr)
    try:
        return func(args)
    except LabkitError as e:
        print(f"labkit: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        try:
            print("labkit: interrupted", file=sys.stderr)
        except OSError:  # the terminal went away (SIGHUP): the teardown already ran, the exit code says it
            pass
        return 130


if __name__ == "__main__":
    sys.exit(main())
