"""Command line of the simulator, shared by `labkit sim` and `python -m labkit.sim` (same flags)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from labkit.sim.config import FIELDS, FLAVORS, PRESETS, SimConfig, SimConfigError, build_config, parse_value

# Settings that have an explicit flag of their own (--host, --port, --model-name, --flavor, --preset), so they
# get no per-setting flag: one spelling each.
EXPLICIT = ("preset", "flavor", "host", "port", "model_name")
METAVARS = {"int": "N", "float": "X", "bool": "BOOL", "str": "TEXT", "list[float]": "X,X,..."}


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
    add_setting_flags(p)


class SettingFlag(argparse.Action):
    """`--decode-tps 40`: the same as `--set decode_tps=40`, kept in command-line order with the --set items
    (the value is read at once, so a bad one is named by its flag)."""

    def __call__(self, parser, namespace, values, option_string=None):
        key = self.dest.removeprefix("setting_")
        try:
            parse_value(key, values)
        except SimConfigError as e:
            raise argparse.ArgumentError(self, str(e)) from None
        namespace.sets = [*(getattr(namespace, "sets", None) or []), f"{key}={values}"]


def setting_flag(key: str) -> str:
    """The flag of setting `key` (decode_tps -> --decode-tps)."""
    return "--" + key.replace("_", "-")


def add_setting_flags(p: argparse.ArgumentParser) -> None:
    """One flag per setting of SimConfig (but EXPLICIT), in a "settings" group; help: its type
    and default. A bool flag alone means true (`--enable-per-request-metrics`, as vLLM spells that switch)."""
    group = p.add_argument_group(
        "settings", "each flag is one --set KEY=VALUE (applied in command-line order)"
    )
    defaults = SimConfig()
    for key, f in FIELDS.items():
        if key in EXPLICIT:
            continue
        default = getattr(defaults, key)
        switch: dict[str, Any] = {"nargs": "?", "const": "true"} if str(f.type) == "bool" else {}
        group.add_argument(
            setting_flag(key),
            dest=f"setting_{key}",
            action=SettingFlag,
            default=argparse.SUPPRESS,
            metavar=METAVARS.get(str(f.type), "VALUE"),
            help=f"{f.type}, default {default!r}".replace("%", "%%"),
            **switch,
        )


def config_from_args(argv: Sequence[str]) -> SimConfig:
    """The settings a simulator started with `argv` (a lane's engine args) runs with, without starting it:
    the lab reads a simulated lane's roofline stand-ins from them."""
    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    add_arguments(p)
    args, _ = p.parse_known_args(list(argv))
    return build_config(args.preset, args.config, args.sets, flavor=args.flavor, model_name=args.model_name)


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
