"""The `labkit` command: argv in, a library call and an exit code out; one module per command group
(recipes, stage, serve, doctor, bench, report, compare, sweep, run, sim, tinymodel), each adding its own
subcommands, assembled by main; common holds what several groups share (lane subcommands, variant options)."""

from labkit.cli.common import plan_from_args
from labkit.cli.main import main

__all__ = ["main", "plan_from_args"]
