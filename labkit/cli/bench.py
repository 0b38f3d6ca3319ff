"""`labkit bench`: measure a running lane (a recipe's, or any URL), print the lab-note table and store the run
(a recipe's under its lane, a URL's under `--lane NAME`; labkit/lab/endpoint_run.py)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import TYPE_CHECKING, Any

from labkit.cli.common import plan_from_args, variant_args
from labkit.errors import LabkitError
from labkit.recipe import LanePlan, MeasurePlan, endpoint_load, with_load

if TYPE_CHECKING:
    from labkit.measure import BenchOptions


def override_plan(plan: MeasurePlan, args: Any) -> MeasurePlan:
    """The plan with command-line overrides applied (only the options the user gave)."""
    d, p = plan.decode, plan.prefill
    d = dataclasses.replace(
        d,
        **{
            k: v
            for k, v in (
                ("turns", args.turns),
                ("output_tokens", args.output_tokens),
                ("concurrency", args.concurrency),
                ("warmup", args.warmup),
            )
            if v is not None
        },
    )
    p = dataclasses.replace(
        p,
        **{
            k: v
            for k, v in (("prompt_tokens", args.prompt_tokens), ("repeats", args.repeats))
            if v is not None
        },
    )
    top = {
        k: v for k, v in (("api", args.api), ("runs", args.runs), ("timeout", args.timeout)) if v is not None
    }
    for name, value, low in (
        ("--turns", d.turns, 0),
        ("--output-tokens", d.output_tokens, 2),
        ("--warmup", d.warmup, 0),
        ("--repeats", p.repeats, 1),
        ("--runs", top.get("runs", 1), 1),
    ):
        if value < low:
            raise LabkitError(f"{name} must be at least {low}, got {value}")
    return dataclasses.replace(plan, decode=d, prefill=p, **top)


def bench_cli(args: Any) -> int:
    """`labkit bench`: resolve the target, measure, print the lab-note table, write the JSON file."""
    from labkit.measure import BenchOptions, LocalNfsProbe, default_plan, render, run_bench

    target = args.target
    lane_plan = None  # a bare URL: no lane, K from /metrics, nothing known about its model or flags
    if (
        "://" in target
        or target.replace(".", "").replace(":", "").isdigit()
        or target.startswith("localhost:")
    ):
        url, plan = target, default_plan()
        if args.url:
            raise LabkitError("--url is for recipe targets; the endpoint is already given")
        if args.spec or args.staging or args.variant:
            raise LabkitError("variants (--spec/--staging/-V) select a recipe's lane; a bare URL has none")
    else:
        if args.lane is not None:
            raise LabkitError("--lane names a bare endpoint's lane; a recipe's runs are stored under its own")
        if args.model_loops:
            raise LabkitError("--model-loops is for a URL: a recipe says so in model.loops")
        args.recipe = target
        lane_plan = plan_from_args(args)
        plan = lane_plan.measure
        url = args.url or lane_plan.client_url
    plan = override_plan(plan, args)
    if args.load is not None:  # a recipe's lane: its [measure.load] and engine caps; a URL: the option alone
        if lane_plan is not None:
            if args.load_requests is not None or args.slo is not None:
                raise LabkitError(
                    "--load-requests and --slo are for a URL: a recipe states them in [measure.load] and "
                    f"[measure.slo] ({lane_plan.file})"
                )
            lane_plan = with_load(lane_plan, args.load)
            plan = dataclasses.replace(plan, workloads=lane_plan.measure.workloads)
        else:
            plan = endpoint_load(plan, args.load, args.load_requests, args.slo)
    elif args.load_requests is not None or args.slo is not None:
        raise LabkitError("--load-requests and --slo go with --load")
    probes = [LocalNfsProbe()] if args.nfs else []
    options = BenchOptions(
        model=args.model,
        cold_expected=args.cold,
        progress=not args.quiet,
        decode=args.decode,
        prefill=args.prefill,
        save_to=args.json,
        io_hooks=probes,
        loops_expected=args.model_loops,
    )
    if lane_plan is not None:  # the lane's settings as `labkit run` sets them, but named by its lane id
        options = dataclasses.replace(options.with_lane(lane_plan), lane=lane_plan.lane_id)
    if args.store and (lane_plan is not None or args.lane is not None):
        return _store_runs(args, lane_plan, plan, url, options)
    result = run_bench(url, plan, options)
    title = f"{result.provenance['model']} @ {result.provenance['endpoint']}"
    print(render(result.summary, title=title), flush=True)
    if args.json:
        print(f"records: {args.json}", file=sys.stderr)
    if lane_plan is None and args.store:
        print("not stored: give --lane NAME to store a bare endpoint's run under a lane", file=sys.stderr)
    return 0 if result.summary.n_ok else 1


def _store_runs(
    args: Any, lane_plan: LanePlan | None, plan: MeasurePlan, url: str, options: BenchOptions
) -> int:
    """Measure into stored run folders, one per repetition: under the recipe's lane, or a bare endpoint's
    under `--lane` (labkit/lab/endpoint_run.py); each run's table printed and its folder named."""
    from labkit.lab import EndpointOrigin, bare_lane, measure_endpoint
    from labkit.measure import render

    if args.json and plan.runs > 1:
        raise LabkitError(
            f"--json writes one file, and {plan.runs} runs are stored as {plan.runs} run folders: give --runs 1 "
            "or --no-store"
        )
    if lane_plan is not None:
        origin: EndpointOrigin = "url" if args.url else "lane"
        runs = measure_endpoint(lane_plan, plan, url, options, origin, args.results)
    else:
        bare = bare_lane(args.lane, url)
        options = dataclasses.replace(options, lane=args.lane)
        runs = measure_endpoint(bare, plan, url, options, "bare", args.results)
    for done in runs:
        title = f"{done.result.provenance['model']} @ {done.result.provenance['endpoint']}"
        print(render(done.result.summary, title=title), flush=True)
        print(f"stored: {done.path}", file=sys.stderr)
    if args.json:
        print(f"records: {args.json}", file=sys.stderr)
    return 0


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x.replace("_", "")) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers like 4096,12600, got {text!r}")
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench", help="measure a running endpoint (URL) or a recipe's lane (decode, prefill, acceptance)"
    )
    p.add_argument(
        "target",
        metavar="ENDPOINT_OR_RECIPE",
        help="http://host:port[/v1], or a recipe name whose measure plan to use (with --url)",
    )
    p.add_argument(
        "--url",
        help="endpoint of the recipe's lane when labkit did not boot it there (default: the lane's client "
        "address, as labkit show prints it); the stored run says so",
    )
    variant_args(p)
    p.add_argument("--json", metavar="OUT", help="write records, summary and provenance to this JSON file")
    p.add_argument(
        "--no-store",
        dest="store",
        action="store_false",
        help="print only: store no run (a recipe's run is stored under its lane by default)",
    )
    p.add_argument("--results", metavar="DIR", help="results folder (default $LABKIT_RESULTS or results/)")
    p.add_argument(
        "--lane",
        metavar="NAME",
        help="store a bare endpoint's run under a lane of this name (no recipe's); without it a URL's run is "
        "not stored",
    )
    p.add_argument(
        "--model-loops",
        action="store_true",
        help="the endpoint's model loops by nature (a random-weight test model): its loops are reported, "
        "not dropped",
    )
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
    p.add_argument(
        "--cold",
        dest="cold",
        action="store_true",
        default=False,
        help="the engine was just booted: measure its first request as the cold turn (checked "
        "against /metrics where the engine has a served-requests counter)",
    )
    p.add_argument(
        "--no-cold", dest="cold", action="store_false", help="no cold turn (the default for a URL)"
    )
    p.add_argument(
        "--load",
        metavar="LEVELS",
        help='load levels: closed-loop streams "1,2,4,8", open-loop rates "0.5/s,2/s" or agentic sessions '
        '"s2,s8", optionally after a profile ("capacity:1,2,4,8", "sweep:1,32"; "capacity" alone: the recipe\'s '
        'levels); "" none; a recipe keeps its other [measure.load] keys',
    )
    p.add_argument("--load-requests", type=int, metavar="N", help="requests per load level (URL targets)")
    p.add_argument(
        "--slo", metavar="BOUNDS", help='SLO of the load levels, e.g. "ttft_s=1.5,tpot_s=0.015" (URL targets)'
    )
    p.add_argument("--no-decode", dest="decode", action="store_false")
    p.add_argument("--no-prefill", dest="prefill", action="store_false")
    p.add_argument(
        "--nfs",
        action="store_true",
        help="also record this host's NFS reads during the run (/proc/self/mountstats serverreadbytes)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=bench_cli)
