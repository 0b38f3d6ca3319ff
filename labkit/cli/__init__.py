"""The `labkit` command: argv in, a library call and an exit code out; one module per command group
(recipes, stage, serve, bench, report, run, sim, tinymodel), each adding its own subcommands, assembled by
main."""

from labkit.cli.common import plan_from_args
from labkit.cli.main import main

__all__ = ["main", "plan_from_args"]
