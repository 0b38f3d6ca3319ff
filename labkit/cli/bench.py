"""`labkit bench`: measure a running lane (a recipe's, or any URL) and print the lab-note table."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from labkit.cli.common import plan_from_args, variant_args
from labkit.errors import LabkitError
from labkit.recipe import MeasurePlan, endpoint_load, with_load


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
        args.recipe = target
        lane_plan = plan_from_args(args)
        plan = lane_plan.measure
        url = args.url or f"http://127.0.0.1:{lane_plan.engine.port}"
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
    )
    if lane_plan is not None:  # the lane's settings as `labkit run` sets them, but named by its lane id
        options = dataclasses.replace(options.with_lane(lane_plan), lane=lane_plan.lane_id)
    result = run_bench(url, plan, options)
    title = f"{result.provenance['model']} @ {result.provenance['endpoint']}"
    print(render(result.summary, title=title), flush=True)
    if args.json:
        print(f"records: {args.json}", file=sys.stderr)
    return 0 if result.summary.n_ok else 1


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
        "--url", help="endpoint of the recipe's running lane (default http://127.0.0.1:<engine.port>)"
    )
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
