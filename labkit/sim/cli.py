"""Command line of the simulator, shared by `labkit sim` and `python -m labkit.sim` (same flags)."""

from __future__ import annotations

import argparse

from labkit.sim.config import FLAVORS, PRESETS, build_config


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", choices=sorted(PRESETS), help="named settings (applied first)")
    p.add_argument(
        "--config", metavar="FILE", help="TOML or JSON file of settings (applied after the preset)"
    )
    p.add_argument(
        "--set",
        dest="sets",
        action="extend",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="settings, one or several per --set, repeatable (applied after --config); a recipe's "
        'engine.args "--set" = ["decode_noise=0.01", "seed=3"] passes several; see `python -m labkit.sim --list`',
    )
    p.add_argument("--flavor", choices=FLAVORS, help="API, metrics and log style to imitate (default vllm)")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument(
        "--port", type=int, help="listen port (default 8000; 0 = any free port, printed in the log)"
    )
    p.add_argument("--model-name", dest="model_name", help="served model name")
    p.add_argument("--list", action="store_true", help="print every setting with its resolved value and exit")


def run(args: argparse.Namespace) -> int:
    """Build the config (errors are SimConfigError, a LabkitError) and serve, or list settings."""
    from dataclasses import asdict

    cfg = build_config(
        args.preset,
        args.config,
        args.sets,
        flavor=args.flavor,
        host=args.host,
        port=args.port,
        model_name=args.model_name,
    )
    if args.list:
        for key, value in asdict(cfg).items():
            print(f"{key} = {value!r}")
        return 0
    from labkit.sim.server import serve

    return serve(cfg)


def main(argv: list[str] | None = None) -> int:
    import sys

    from labkit.errors import LabkitError

    parser = argparse.ArgumentParser(prog="python -m labkit.sim", description="labkit's simulated LLM engine")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except LabkitError as e:
        print(f"labkit sim: error: {e}", file=sys.stderr)
        return 1
