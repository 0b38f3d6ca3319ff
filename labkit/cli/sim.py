"""`labkit sim`: the simulated engine as a command (its options and server live in labkit.sim)."""

from __future__ import annotations

import argparse


def cmd_sim(args: argparse.Namespace) -> int:
    from labkit.sim import run_cli as run

    return run(args)


def add_sim(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from labkit.sim import add_cli_arguments as sim_arguments

    p = sub.add_parser("sim", help="run the simulated engine (an OpenAI-compatible server at known speeds)")
    sim_arguments(p)
    p.set_defaults(func=cmd_sim)
