"""`labkit doctor`: the lane's pre-boot checks as a report, plus its flags against the engine's own --help and
probes of the engine's code, without starting anything (docs/engines.md, "Pre-boot checks and labkit doctor").
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from labkit.cli.common import add_lane_command, plan_from_args

if TYPE_CHECKING:
    from labkit.serve import Lane, Measured


def cmd_doctor(args: argparse.Namespace) -> int:
    """A table per node; exit 1 when any check failed. The page cache is never dropped here."""
    from labkit.serve import Lane, doctor, measure_bandwidth, node_tables, store_fabric

    lane = Lane(plan_from_args(args), progress=sys.stderr)
    try:
        checks = doctor(lane.state, probes=args.probe, pull=args.pull)
        measured = measure_bandwidth(lane.state) if args.bandwidth else None
        fabric = store_fabric(lane.plan, measured) if measured else None
        if fabric is not None:
            print(f"fabric for the roofline: {fabric['source']}", file=sys.stderr)
        if args.roofline:
            store_roofline(lane)
    finally:
        lane.close()
    failed = [c for c in checks if c.failed]
    if args.json:
        doc = {"lane_id": lane.lane_id, "ok": not failed, "checks": [c.to_dict() for c in checks]}
        if measured is not None:
            doc["bandwidth"] = [m.to_dict() for m in measured]
        print(json.dumps(doc, indent=2))
        return 1 if failed else 0
    print(node_tables(checks, lane.group.head.name))
    print()
    if measured is not None:
        print(bandwidth_table(measured))
        print()
    nodes = sorted({c.node for c in failed}, key=lane.group.names.index)
    kept = "; the page cache was left alone (a start drops it)" if lane.plan.engine.drop_caches else ""
    if failed:
        print(f"doctor: {len(failed)} check(s) failed on {', '.join(nodes)}; nothing was started{kept}")
    else:
        print(f"doctor: no check failed on {len(lane.group)} node(s); nothing was started{kept}")
    return 1 if failed else 0


def store_roofline(lane: Lane) -> None:
    """The checkpoint's headers read on the head and stored beside the recipe, then the roofline they give
    (docs/roofline.md); said on stderr, so `--json` keeps stdout for the checks."""
    from labkit import lab
    from labkit.serve import read_headers, store_headers

    head = lane.group.head
    print(f"reading the checkpoint's safetensors headers on {head.name}", file=sys.stderr)
    digest, config = read_headers(lane.plan, head)
    folder = store_headers(lane.plan, digest, config)
    print(
        f"roofline: {len(digest.files)} files, {len(digest.tensors):,} tensors, {digest.total_bytes / 1e9:,.2f} GB; "
        f"stored in {folder}",
        file=sys.stderr,
    )
    print(lab.roofline(lane.plan), file=sys.stderr)


def bandwidth_table(measured: list[Measured]) -> str:
    """pair, tool, where it ran (the node's PATH or the lane's image), figure (or why there is none)."""
    from tabulate import tabulate

    rows = [
        (m.pair, m.tool, m.where or "-", f"{m.figure:g} {m.unit}" if m.figure is not None else m.line)
        for m in measured
    ]
    return tabulate(rows, headers=["pair", "tool", "ran from", "figure"])


def add_doctor(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_lane_command(
        sub,
        "doctor",
        "check a lane's nodes, image and engine flags before booting it (starts nothing)",
        cmd_doctor,
    )
    p.add_argument(
        "--probe",
        action="append",
        default=[],
        metavar="NAME",
        help="a string (e.g. an environment variable) to look for in the engine's code in the image; repeatable",
    )
    p.add_argument("--pull", action="store_true", help="pull the image where it is missing (as `up` would)")
    p.add_argument(
        "--roofline",
        action="store_true",
        help="read the checkpoint's safetensors headers on the head and store them beside the recipe (docs/roofline.md)",
    )
    p.add_argument("--json", action="store_true", help="every check as JSON")
    p.add_argument(
        "--bandwidth",
        action="store_true",
        help="also measure the fabric: ib_write_bw head to each node, all_reduce_perf over the lane, where present",
    )
