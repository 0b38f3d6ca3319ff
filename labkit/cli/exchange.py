"""`labkit import FILE` and `labkit export RUN`: other tools' result files stored as runs beside labkit's own,
and a labkit run written in their formats (docs/imports.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def cmd_import(args: argparse.Namespace) -> int:
    from labkit.errors import LabkitError
    from labkit.exchange import ReadOptions, import_file, refresh_imports

    if args.refresh:
        if args.file or args.lane or args.recipe or args.format:
            raise LabkitError(
                "--refresh reads every stored import again from the file it keeps: give no FILE"
            )
        done = refresh_imports(args.results)
        for r in done:
            said = f"  ({len(r.changed)} measures: {', '.join(r.changed[:6])}{'…' if len(r.changed) > 6 else ''})"
            print(f"{r.action:9} {r.path}" + (said if r.changed else ""))
        print(f"{sum(r.action == 'refreshed' for r in done)} of {len(done)} stored imports refreshed")
        return 0
    if not args.file:
        raise LabkitError("give the result FILE to import (or --refresh)")
    outcomes = import_file(
        args.file,
        lane=args.lane,
        recipe=args.recipe,
        fmt=args.format,
        results=args.results,
        options=ReadOptions(extra_keys=args.extra_keys),
    )
    for o in outcomes:
        imp = o.imported
        unread = f"; {len(imp.unread)} key(s) kept unread" if imp.unread else ""
        print(f"{o.action:9} {o.path}  ({imp.tool_label}, {len(imp.figures)} figures{unread})")
    return 0


def add_import(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "import", help="store another tool's result file as runs, each figure with its definition"
    )
    p.add_argument("file", metavar="FILE", nargs="?", help="the result file (JSON or JSON Lines)")
    p.add_argument(
        "--refresh",
        action="store_true",
        help="read every stored import again from the file it keeps, and rewrite the figures and definitions "
        "this labkit reads otherwise (each run records when; nothing else of a run changes)",
    )
    p.add_argument("--lane", metavar="NAME", help="the lane the file measured (default: from its model name)")
    p.add_argument("--recipe", metavar="R", help="the recipe of the lane the file measured, if labkit has it")
    p.add_argument(
        "--format",
        metavar="NAME",
        help="refuse the file unless it is this format, e.g. vllm-bench (default: recognised from its keys)",
    )
    p.add_argument(
        "--extra-keys",
        action="store_true",
        help="keep keys the format's reader does not know (listed as unread) instead of refusing the file",
    )
    p.add_argument("--results", metavar="DIR", help="results folder (default $LABKIT_RESULTS or results/)")
    p.set_defaults(func=cmd_import)


def cmd_export(args: argparse.Namespace) -> int:
    from labkit.exchange import export_run

    doc = export_run(
        args.run, args.format, results=args.results, concurrency=args.concurrency, level=args.level
    )
    text = json.dumps(doc, indent=2) + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
        print(f"wrote {args.output} ({args.format})", file=sys.stderr)
    return 0


def add_export(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("export", help="write a stored labkit run in another tool's result format")
    p.add_argument("run", metavar="RUN", help="the run id (or its folder)")
    p.add_argument("--format", required=True, metavar="NAME", help="vllm-bench or llama-benchy")
    p.add_argument(
        "--concurrency",
        type=int,
        default=1,
        metavar="N",
        help="vllm-bench: the decode concurrency whose requests make the file (default 1)",
    )
    p.add_argument(
        "--level",
        metavar="LEVEL",
        help="vllm-bench: a load level instead of the decode requests, c<N> (closed loop, c4) or <R>/s (2/s)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="where to write (default: standard output)")
    p.add_argument("--results", metavar="DIR", help="results folder (default $LABKIT_RESULTS or results/)")
    p.set_defaults(func=cmd_export)
