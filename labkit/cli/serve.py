"""`labkit up`, `status`, `logs`, `down`: a recipe's lane left running between commands.

The lane id is deterministic, so the lane `up` started is found again by the others.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from labkit.cli.common import add_lane_command, plan_from_args
from labkit.errors import LabkitError
from labkit.nodes import ending_as_interrupt

if TYPE_CHECKING:
    from labkit.serve import Lane


def _lane(args: argparse.Namespace, **kwargs: Any) -> Lane:
    from labkit.serve import Lane

    return Lane(plan_from_args(args), **kwargs)


def cmd_up(args: argparse.Namespace) -> int:
    """Boot the lane and leave it running (`labkit down` removes it); Ctrl-C during boot removes it."""
    import tempfile

    from labkit.lab import materialize_model
    from labkit.store import RunFolderSink

    run_dir = args.logs or tempfile.mkdtemp(prefix="labkit-up-")
    lane = _lane(args, sink=RunFolderSink(run_dir))
    if lane.plan.staging:  # the view must exist and verify before the engine is pointed at it
        from labkit.nodes import check_reachable
        from labkit.stage import check_view, stage

        check_reachable(lane.group)
        lane.refuse_if_present()  # re-staging under a running engine would replace files it has open
        with ending_as_interrupt():
            print(stage(lane.plan, lane.group.hosts).table())
            check_view(lane.plan, lane.group.hosts)
    materialize_model(lane)
    endpoint = lane.start()
    b = endpoint.boot
    print(f"lane {endpoint.lane_id} is up: {endpoint.base_url} (model {endpoint.model})")
    print(
        f"  boot {b.boot_seconds:.1f} s; KV pool {b.kv_pool_tokens if b.kv_pool_tokens is not None else '?'} tokens; "
        f"engine {b.engine_version or '?'}; boot log and facts in {run_dir}"
    )
    print(f"  remove it with: labkit down {args.recipe}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    lane = _lane(args)
    lane.down()
    print(
        f"lane {lane.lane_id}: removed on {len(lane.group)} node(s) ({', '.join(lane.group.names)}), verified"
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    lane = _lane(args, progress=None)
    states = lane.status()
    for node, state in states.items():
        print(f"{node}: {state}")
    alive = all(s == "alive" for s in states.values())
    ready = alive and lane.ready()
    print(
        f"lane {lane.lane_id}: "
        + (
            "ready at " + lane.root_url + "/v1"
            if ready
            else "running, not ready"
            if alive
            else "down"
            if all(s == "absent" for s in states.values())
            else "broken"
        )
    )
    return 0 if ready else 3


def cmd_logs(args: argparse.Namespace) -> int:
    lane = _lane(args, progress=None)
    nodes = [args.node] if args.node else None
    if args.node and args.node not in lane.group.names:
        raise LabkitError(f"--node {args.node}: not a node of this lane ({', '.join(lane.group.names)})")
    if args.follow:
        lane.follow(sys.stdout, nodes)
        return 0
    for node, text in lane.logs(tail=args.tail, nodes=nodes).items():
        if len(lane.group) > 1 and not args.node:
            print(f"==> {node} <==")
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    return 0


def add_up(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_lane_command(sub, "up", "boot a lane on its nodes and leave it running", cmd_up)
    p.add_argument(
        "--logs", metavar="DIR", help="folder for boot logs and boot.json (default: a temp folder)"
    )


def add_down(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_lane_command(sub, "down", "remove a lane on every node and verify it is gone", cmd_down)


def add_status(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    add_lane_command(sub, "status", "per-node state of a lane (exit 0 only when ready)", cmd_status)


def add_logs(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_lane_command(sub, "logs", "print the end of each node's engine log", cmd_logs)
    p.add_argument("--tail", type=int, default=50, help="lines per node (default 50)")
    p.add_argument("--node", help="only this node")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until Ctrl-C")
