"""The `labkit` command: one module per command group, each a thin layer over the library."""

from labkit.cli.common import plan_from_args
from labkit.cli.main import main

__all__ = ["main", "plan_from_args"]
