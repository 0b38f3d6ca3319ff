"""`labkit stage`: preflight every launch node and build/verify the lane's local view(s) on it."""

from __future__ import annotations

import argparse

from labkit.cli.common import add_lane_command, plan_from_args
from labkit.errors import LabkitError
from labkit.nodes import ending_as_interrupt


def cmd_stage(args: argparse.Namespace) -> int:
    """Preflight every launch node, build/verify the local view(s); --dry-run stops after the preflight."""
    from labkit import stage as staging
    from labkit.nodes import SshOptions, hosts_for_plan

    plan = plan_from_args(args)
    if not any(e.kind == "local-view" for e in plan.staging):
        raise LabkitError(
            f"{plan.file}: the lane {plan.recipe} ({plan.variant_id}) has no [[staging]] local-view "
            "entry; pick a staging variant, e.g. --staging local-view"
        )
    checks = {"full": args.full, "deep": args.deep, "replace_foreign": args.replace_foreign}
    group = hosts_for_plan(plan, SshOptions.from_env())
    try:
        if args.dry_run:
            with ending_as_interrupt():
                rows_per_view = staging.preflight(plan, group, **checks)
            for rows in rows_per_view:
                print(staging.preflight_table(rows))
            print("preflight only (read-only): every node has room; run without --dry-run to stage")
            return 0
        from labkit.serve import Lane

        # re-staging under this lane's running engine would replace files it has open
        Lane(plan, group=group, progress=None).refuse_if_present()
        with ending_as_interrupt():  # SIGTERM/SIGHUP stop the node copies like Ctrl-C does
            report = staging.stage(plan, group, **checks)
            print(report.table())
            staging.check_view(plan, group)
    finally:
        group.close()
    return 0


def add_stage(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_lane_command(
        sub, "stage", "stage the lane's local view on every node (preflight, copy, link, verify)", cmd_stage
    )
    p.add_argument("--full", action="store_true", help="hash whole files (slow) instead of sampled blocks")
    p.add_argument(
        "--deep",
        action="store_true",
        help="SHA-256 of every local copy against its blob name in the shared cache, recorded so that later "
        'stages re-hash only what changed (recipe: staging.verify = "deep")',
    )
    p.add_argument(
        "--replace-foreign",
        action="append",
        default=[],
        metavar="NAME",
        help="let staging replace or remove the file NAME in dst although labkit did not make it "
        "(by default such a file in the way is refused); repeat for each file",
    )
    p.add_argument("--dry-run", action="store_true", help="only the read-only preflight (need/free per node)")
