"""The `labkit` command: argv in, a library call and an exit code out; one module per command group
(recipes, stage, serve, doctor, bench, report, compare, exchange, sweep, run, sim, tinymodel), each adding its own
subcommands, assembled by app (`main`); common holds what several groups share (lane subcommands, variant options)."""

from labkit.cli.app import main

__all__ = [
    "main",
]
