"""The `labkit` command: a thin layer over the library; every subcommand calls one labkit function."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from labkit import __version__
from labkit.cli.common import plan_from_args, variant_args
from labkit.errors import LabkitError
from labkit.nodes import ending_as_interrupt
from labkit.recipe import find_recipe, list_recipes, load_recipe


def cmd_recipes(args: argparse.Namespace) -> int:
    from tabulate import tabulate

    rows = []
    for folder in list_recipes():
        try:
            r = load_recipe(folder)
        except LabkitError as e:
            rows.append([folder.name, "", "", "", f"INVALID: {e}"])
            continue
        axes = "; ".join(f"{a}: {'|'.join(n)}" for a, n in r.axes.items())
        eng = r.data["engine"]
        rows.append([r.name, ", ".join(r.aliases), f"{eng['kind']} x{len(r.data['cluster']['nodes'])}", axes,
                     r.data["lane"]["label"] or ""])
    print(tabulate(rows, headers=["recipe", "aliases", "engine", "variants", "label"]))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from labkit.recipe import describe_plan
    from labkit.serve import lane_commands

    plan = plan_from_args(args)
    commands = lane_commands(plan)
    if args.json:
        print(json.dumps({**plan.to_dict(), "commands": commands}, indent=2))
    else:
        print(describe_plan(plan, commands=commands))
    return 0


def _lane(args: argparse.Namespace, **kwargs):
    from labkit.serve import Lane

    return Lane(plan_from_args(args), **kwargs)


def cmd_up(args: argparse.Namespace) -> int:
    """Boot the lane and leave it running (`labkit down` removes it); Ctrl-C during boot removes it."""
    import tempfile

    run_dir = args.logs or tempfile.mkdtemp(prefix="labkit-up-")
    lane = _lane(args, run_dir=run_dir)
    if lane.plan.staging:  # the view must exist and verify before the engine is pointed at it
        from labkit.nodes import check_reachable
        from labkit.stage import check_view, stage

        check_reachable(lane.group)
        lane.refuse_if_present()  # re-staging under a running engine would replace files it has open
        with ending_as_interrupt():
            print(stage(lane.plan, lane.group.hosts).table())
            check_view(lane.plan, lane.group.hosts)
    endpoint = lane.start()
    b = endpoint.boot
    print(f"lane {endpoint.lane_id} is up: {endpoint.base_url} (model {endpoint.model})")
    print(f"  boot {b.boot_seconds:.1f} s; KV pool {b.kv_pool_tokens if b.kv_pool_tokens is not None else '?'} tokens; "
          f"engine {b.engine_version or '?'}; boot log and facts in {run_dir}")
    print(f"  remove it with: labkit down {args.recipe}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    lane = _lane(args)
    lane.down()
    print(f"lane {lane.lane_id}: removed on {len(lane.group)} node(s) ({', '.join(lane.group.names)}), verified")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    lane = _lane(args, progress=None)
    states = lane.status()
    for node, state in states.items():
        print(f"{node}: {state}")
    alive = all(s == "alive" for s in states.values())
    ready = alive and lane.ready()
    print(f"lane {lane.lane_id}: " + ("ready at " + lane.root_url + "/v1" if ready else
                                       "running, not ready" if alive else
                                       "down" if all(s == "absent" for s in states.values()) else "broken"))
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


def cmd_stage(args: argparse.Namespace) -> int:
    """Preflight every launch node, build/verify the local view(s); --dry-run stops after the preflight."""
    from labkit import stage as staging
    from labkit.nodes import SshOptions, hosts_for_plan

    plan = plan_from_args(args)
    if not any(e.kind == "local-view" for e in plan.staging):
        raise LabkitError(f"{plan.file}: the lane {plan.recipe} ({plan.variant_id}) has no [[staging]] local-view "
                          "entry; pick a staging variant, e.g. --staging local-view")
    group = hosts_for_plan(plan, SshOptions.from_env())
    try:
        if args.dry_run:
            with ending_as_interrupt():
                rows_per_view = staging.preflight(plan, group, full=args.full)
            for rows in rows_per_view:
                print(staging.preflight_table(rows))
            print("preflight only (read-only): every node has room; run without --dry-run to stage")
            return 0
        from labkit.serve import Lane

        # re-staging under this lane's running engine would replace files it has open
        Lane(plan, group=group, progress=None).refuse_if_present()
        with ending_as_interrupt():  # SIGTERM/SIGHUP stop the node copies like Ctrl-C does
            report = staging.stage(plan, group, full=args.full)
            print(report.table())
            staging.check_view(plan, group)
    finally:
        group.close()
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    folders = [find_recipe(n) for n in args.recipes] if args.recipes else list_recipes()
    if not folders:
        print("no recipes found", file=sys.stderr)
        return 1
    failed = 0
    for folder in folders:
        try:
            r = load_recipe(folder)
        except LabkitError as e:
            failed += 1
            print(f"FAIL {folder.name}: {e}")
            continue
        combos = sum(len(n) for n in r.axes.values()) or 1
        note = "" if r.note.is_file() else "  (warning: no NOTE.md)"
        print(f"ok   {r.name} ({combos} variants){note}")
    return 1 if failed else 0


def cmd_tiny_model(args: argparse.Namespace) -> int:
    from labkit import tinymodel

    path = tinymodel.ensure(args.preset, log=None if args.quiet else sys.stderr)
    print(json.dumps({"path": str(path), **(tinymodel.facts(path) or {})}, indent=2) if args.json else path)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from labkit import report

    if args.check:
        ok, diff = report.check(args.results, args.tables)
        if ok:
            print("TABLES.md is up to date")
            return 0
        sys.stdout.write(diff)
        print("labkit: TABLES.md drifted from the stored results; run `labkit report` and commit it",
              file=sys.stderr)
        return 1
    rep = report.generate(args.results, args.tables, plots=not args.no_plots)
    print(f"wrote {rep.tables_path} ({len(rep.tables)} tables)")
    for path in rep.plots:
        print(f"wrote {path}")
    for path, reason in rep.skipped:
        print(f"skipped {path}: {reason}", file=sys.stderr)
    return 0


def cmd_import_note(args: argparse.Namespace) -> int:
    from labkit.store import import_figures

    for outcome in import_figures(args.figures, args.results):
        print(f"{outcome.action:9} {outcome.path}")
    return 0


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

def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x.replace("_", "")) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 4096,12600, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def cmd_bench(args: argparse.Namespace) -> int:
    from labkit.cli.bench import bench_cli

    return bench_cli(args)


def cmd_sim(args: argparse.Namespace) -> int:
    from labkit.sim import run_cli as run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="labkit", description="Measure LLM serving lanes reproducibly.")
    parser.add_argument("--version", action="version", version=f"labkit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("recipes", help="list recipes, aliases and variants")
    p.set_defaults(func=cmd_recipes)

    p = sub.add_parser("show", help="print the resolved lane plan")
    p.add_argument("recipe")
    variant_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable plan")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("up", help="boot a lane on its nodes and leave it running")
    p.add_argument("recipe")
    variant_args(p)
    p.add_argument("--logs", metavar="DIR", help="folder for boot logs and boot.json (default: a temp folder)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("down", help="remove a lane on every node and verify it is gone")
    p.add_argument("recipe")
    variant_args(p)
    p.set_defaults(func=cmd_down)

    p = sub.add_parser("status", help="per-node state of a lane (exit 0 only when ready)")
    p.add_argument("recipe")
    variant_args(p)
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("logs", help="print the end of each node's engine log")
    p.add_argument("recipe")
    variant_args(p)
    p.add_argument("--tail", type=int, default=50, help="lines per node (default 50)")
    p.add_argument("--node", help="only this node")
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until Ctrl-C")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("stage", help="stage the lane's local view on every node (preflight, copy, link, verify)")
    p.add_argument("recipe")
    variant_args(p)
    p.add_argument("--full", action="store_true", help="hash whole files (slow) instead of sampled blocks")
    p.add_argument("--dry-run", action="store_true", help="only the read-only preflight (need/free per node)")
    p.set_defaults(func=cmd_stage)

    p = sub.add_parser("bench", help="measure a running endpoint (URL) or a recipe's lane (decode, prefill, acceptance)")
    p.add_argument("target", metavar="ENDPOINT_OR_RECIPE",
                   help="http://host:port[/v1], or a recipe name whose measure plan to use (with --url)")
    p.add_argument("--url", help="endpoint of the recipe's running lane (default http://127.0.0.1:<engine.port>)")
    variant_args(p)
    p.add_argument("--json", metavar="OUT", help="write records, summary and provenance to this JSON file")
    p.add_argument("--model", help="model id to request (default: the first one /v1/models lists)")
    p.add_argument("--api", choices=["chat", "completions"])
    p.add_argument("--turns", type=int, help="c1 turns and cK groups per concurrency")
    p.add_argument("--output-tokens", type=int, help="forced output length N of decode requests")
    p.add_argument("--concurrency", type=_int_list, help="decode concurrencies, e.g. 1,2")
    p.add_argument("--warmup", type=int, help="warmup requests before the warm turns")
    p.add_argument("--prompt-tokens", type=_int_list, help="prefill prompt lengths, e.g. 4096,12600")
    p.add_argument("--repeats", type=int, help="prefill samples per length")
    p.add_argument("--runs", type=int, help="repeat the whole plan")
    p.add_argument("--timeout", type=float, help="seconds allowed per request")
    p.add_argument("--cold", dest="cold", action="store_true", default=False,
                   help="the engine was just booted: measure its first request as the cold turn (checked "
                        "against /metrics where the engine has a served-requests counter)")
    p.add_argument("--no-cold", dest="cold", action="store_false", help="no cold turn (the default for a URL)")
    p.add_argument("--no-decode", dest="decode", action="store_false")
    p.add_argument("--no-prefill", dest="prefill", action="store_false")
    p.add_argument("--nfs", action="store_true",
                   help="also record this host's NFS reads during the run (/proc/self/mountstats serverreadbytes)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("tiny-model", help="build (once) and print the path of a tiny random-weight llama GGUF")
    p.add_argument("preset", nargs="?", default="tiny-llama",
                   help="tiny-llama (default), tiny-llama-small or tiny-llama-eos")
    p.add_argument("--json", action="store_true", help="print the build facts (spec, versions, sha256)")
    p.add_argument("--quiet", "-q", action="store_true")
    p.set_defaults(func=cmd_tiny_model)

    p = sub.add_parser("check", help="validate recipes (all when none named); non-zero exit on any error")
    p.add_argument("recipes", nargs="*")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("report", help="regenerate results/TABLES.md and plots from stored runs")
    p.add_argument("--check", action="store_true",
                   help="regenerate in memory; exit 1 with a diff if the committed TABLES.md drifted")
    p.add_argument("--results", metavar="DIR", help="results folder (default $LABKIT_RESULTS or results/)")
    p.add_argument("--tables", metavar="FILE", help="table definitions (default DIR/tables.toml)")
    p.add_argument("--no-plots", action="store_true", help="write TABLES.md only")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("import-note", help="store the lab note's recorded figures as runs (idempotent)")
    p.add_argument("--figures", metavar="FILE", help="figures file (default results/recorded.toml)")
    p.add_argument("--results", metavar="DIR", help="results folder (default $LABKIT_RESULTS or results/)")
    p.set_defaults(func=cmd_import_note)

    p = sub.add_parser("run", help="execute a notebook template with papermill (e.g. labkit run bench -p recipe sim)")
    p.add_argument("notebook", help="template name in notebooks/ (bench, compare) or a path")
    p.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="parameter; True/False/None/ints/floats converted only when they read back identically")
    p.add_argument("-r", "--raw-param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="parameter passed as a string")
    p.add_argument("-o", "--output", help="executed notebook path (default out/<name>-<UTC stamp>.ipynb)")
    p.add_argument("--execution-timeout", type=float, default=None, metavar="S", help="per-cell timeout")
    p.set_defaults(func=cmd_run)

    from labkit.sim import add_cli_arguments as sim_arguments

    p = sub.add_parser("sim", help="run the simulated engine (an OpenAI-compatible server at known speeds)")
    sim_arguments(p)
    p.set_defaults(func=cmd_sim)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
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
