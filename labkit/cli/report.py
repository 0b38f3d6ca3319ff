"""`labkit report` and `labkit import-note`: tables and plots from the stored runs, and the lab note's
recorded figures stored as runs."""

from __future__ import annotations

import argparse
import sys


def cmd_report(args: argparse.Namespace) -> int:
    from labkit import report

    if args.check:
        ok, diff = report.check(args.results, args.tables)
        if ok:
            print("TABLES.md is up to date")
            return 0
        sys.stdout.write(diff)
        print(
            "labkit: TABLES.md drifted from the stored results; run `labkit report` and commit it",
            file=sys.stderr,
        )
        return 1
    rep = report.generate(args.results, args.tables, plots=not args.no_plots)
    print(f"wrote {rep.tables_path} ({len(rep.tables)} tables)")
    for path in rep.plots:
        print(f"wrote {path}")
    for skipped, reason in rep.skipped:
        print(f"skipped {skipped}: {reason}", file=sys.stderr)
    return 0


def cmd_import_note(args: argparse.Namespace) -> int:
    from labkit.store import import_figures

    for outcome in import_figures(args.figures, args.results):
        print(f"{outcome.action:9} {outcome.path}")
    return 0


def add_report(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="regenerate results/TABLES.md and plots from stored runs")
    p.add_argument(
        "--check",
        action="store_true",
        help="regenerate in memory; exit 1 with a diff if the committed TABLES.md drifted",
    )
    p.add_argument("--results", metavar="DIR", help="results folder (default $LABKIT_RESULTS or results/)")
    p.add_argument("--tables", metavar="FILE", help="table definitions (default DIR/tables.toml)")
    p.add_argument("--no-plots", action="store_true", help="write TABLES.md only")
    p.set_defaults(func=cmd_report)


def add_import_note(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("import-note", help="store the lab note's recorded figures as runs (idempotent)")
    p.add_argument("--figures", metavar="FILE", help="figures file (default results/recorded.toml)")
    p.add_argument("--results", metavar="DIR", help="results folder (default $LABKIT_RESULTS or results/)")
    p.set_defaults(func=cmd_import_note)
