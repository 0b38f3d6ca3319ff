"""Every environment variable labkit reads, with its meaning, read in this one module.

Settings are read when asked for (`current()`), never cached at import: tests, `labkit run` and notebooks
set them per process, and a value read once at import would go stale. Code elsewhere asks for a field of
`current()` instead of reading `os.environ` itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# name -> meaning; the single list of what labkit understands (README and docs/architecture.md point here).
VARIABLES: dict[str, str] = {
    "LABKIT_RECIPES": "folder of recipe folders (default: the recipes/ of the working directory's checkout, else "
    "of the installed one)",
    "LABKIT_RESULTS": "results folder runs are stored in and tables read from (default: the results/ of the working "
    "directory's checkout, else of the installed one)",
    "LABKIT_CACHE": "cache folder for labkit-built tiny models (<cache>/models) and device probes (<cache>/probes; default ~/.cache/labkit)",
    "LABKIT_BATCH": "1: plain progress lines for batch runs (set by `labkit run`); 0: live bars even under papermill",
    "LABKIT_BAR_SECONDS": "seconds between redraws of a progress bar in batch mode (default 30; `labkit run` on a "
    "terminal sets 1)",
    "LABKIT_HTTP": "httpx: the OpenAI SDK's default HTTP client instead of aiohttp",
    "LABKIT_LOOP": "asyncio: the standard event loop instead of uvloop",
    "LABKIT_API_KEY": "API key sent to the endpoint (then OPENAI_API_KEY; local engines accept any)",
    "LABKIT_SSH_KEY": "private key file for SSH to the nodes (default: your usual keys and agent)",
    "LABKIT_SSH_KNOWN_HOSTS": "known_hosts file for the nodes (unknown host keys are always refused)",
    "LABKIT_SSH_USER": "SSH user for the nodes when the recipe names none",
    "LABKIT_SSH_PORT": "SSH port of the nodes",
    "LABKIT_STATE_DIR": "on a node: where process-runtime lanes keep pid and log files (shell default "
    "$HOME/.cache/labkit); read by the node's shell, not by this module",
}

API_KEY_VARS = ("LABKIT_API_KEY", "OPENAI_API_KEY")


@dataclass(frozen=True)
class Settings:
    """The variables above as one value; None (or False) where unset."""

    recipes: str | None = None
    results: str | None = None
    cache: str | None = None
    batch: str | None = None  # the raw value; labkit.progress.batch_mode says what it means
    bar_seconds: str | None = None  # as given; labkit.progress.bar_interval makes it a number
    http: str | None = None
    loop: str | None = None
    api_key: str | None = None
    ssh_key: str | None = None
    ssh_known_hosts: str | None = None
    ssh_user: str | None = None
    ssh_port: str | None = None  # as given; labkit.nodes.SshOptions.from_env makes it a number
    papermill: bool = False  # PAPERMILL_EXECUTION is set (papermill's own variable)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from `env` (default: this process's environment); empty strings count as unset."""
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            return env.get(name) or None

        return cls(
            recipes=get("LABKIT_RECIPES"),
            results=get("LABKIT_RESULTS"),
            cache=get("LABKIT_CACHE"),
            batch=env.get("LABKIT_BATCH"),
            bar_seconds=get("LABKIT_BAR_SECONDS"),
            http=get("LABKIT_HTTP"),
            loop=get("LABKIT_LOOP"),
            api_key=next((env[v] for v in API_KEY_VARS if env.get(v)), None),
            ssh_key=get("LABKIT_SSH_KEY"),
            ssh_known_hosts=get("LABKIT_SSH_KNOWN_HOSTS"),
            ssh_user=get("LABKIT_SSH_USER"),
            ssh_port=get("LABKIT_SSH_PORT"),
            papermill=bool(env.get("PAPERMILL_EXECUTION")),
        )


def current() -> Settings:
    """The settings of this process right now."""
    return Settings.from_env()


def cache_root() -> Path:
    """labkit's cache folder on this machine: $LABKIT_CACHE, else ~/.cache/labkit (built models, probes)."""
    root = current().cache
    return Path(root) if root else Path.home() / ".cache" / "labkit"
