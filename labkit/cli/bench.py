"""`labkit bench`: measure a running lane (a recipe's, or any URL) and print the lab-note table."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from labkit.cli.common import plan_from_args
from labkit.errors import LabkitError
from labkit.measure import LocalNfsProbe, default_plan, render, run_bench
from labkit.recipe import MeasurePlan


def override_plan(plan: MeasurePlan, args: Any) -> MeasurePlan:
    """The plan with command-line overrides applied (only the options the user gave)."""
    d, p = plan.decode, plan.prefill
    d = dataclasses.replace(d, **{k: v for k, v in (("turns", args.turns), ("output_tokens", args.output_tokens),
                                                      ("concurrency", args.concurrency), ("warmup", args.warmup))
                                  if v is not None})
    p = dataclasses.replace(p, **{k: v for k, v in (("prompt_tokens", args.prompt_tokens), ("repeats", args.repeats))
                                  if v is not None})
    top = {k: v for k, v in (("api", args.api), ("runs", args.runs), ("timeout", args.timeout)) if v is not None}
    for name, value, low in (("--turns", d.turns, 0), ("--output-tokens", d.output_tokens, 2),
                             ("--warmup", d.warmup, 0), ("--repeats", p.repeats, 1), ("--runs", top.get("runs", 1), 1)):
        if value < low:
            raise LabkitError(f"{name} must be at least {low}, got {value}")
    return dataclasses.replace(plan, decode=d, prefill=p, **top)


def bench_cli(args: Any) -> int:
    """`labkit bench`: resolve the target, measure, print the lab-note table, write the JSON file."""
    target = args.target
    recipe_hash = variant = None
    lane = ""
    if "://" in target or target.replace(".", "").replace(":", "").isdigit() or target.startswith("localhost:"):
        url, plan = target, default_plan()
        if args.url:
            raise LabkitError("--url is for recipe targets; the endpoint is already given")
        if args.spec or args.staging or args.variant:
            raise LabkitError("variants (--spec/--staging/-V) select a recipe's lane; a bare URL has none")
    else:
        args.recipe = target
        lane_plan = plan_from_args(args)
        plan, lane = lane_plan.measure, lane_plan.lane_id
        recipe_hash, variant = lane_plan.recipe_hash, lane_plan.variant_id
        url = args.url or f"http://127.0.0.1:{lane_plan.engine.port}"
    plan = override_plan(plan, args)
    probes = [LocalNfsProbe()] if args.nfs else []
    result = run_bench(url, plan, model=args.model, cold_expected=args.cold, progress=not args.quiet, lane=lane,
                       recipe_hash=recipe_hash, variant=variant, decode=args.decode, prefill=args.prefill,
                       save_to=args.json, io_hooks=probes)
    title = f"{result.provenance['model']} @ {result.provenance['endpoint']}"
    print(render(result.summary, title=title), flush=True)
    if args.json:
        print(f"records: {args.json}", file=sys.stderr)
    return 0 if result.summary.n_ok else 1
