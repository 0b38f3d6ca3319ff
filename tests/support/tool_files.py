"""Result files written by the real benchmark tools against one real vLLM CPU server, for the import tests.

`vllm bench serve` ships with the vLLM CPU build; the other tools (llama-benchy, guidellm, aiperf, SGLang's
bench_serving) live in venvs of their own that the test setup makes under <venv>/tools/<name> (their
dependencies clash with vLLM's). Each tool runs offline: the tokenizer is the tiny model's folder, no hub. A tool
that is not installed is absent from the result, and its tests skip saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.vllm import vllm_executable

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
TOOL_TIMEOUT = 600.0
PROMPT, OUTPUT, REQUESTS = 128, 32, 6


@dataclass
class ToolFiles:
    """{format: the file its tool wrote}, the command that wrote each, and why a tool could not run."""

    files: dict[str, Path] = field(default_factory=dict)
    commands: dict[str, list[str]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


def tools_root() -> Path:
    return Path(sys.prefix) / "tools"


def _run(argv: list[str], log: Path, cwd: Path) -> None:
    env = dict(os.environ, **OFFLINE)
    with open(log, "wb") as out:
        r = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, timeout=TOOL_TIMEOUT)
    if r.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"{argv[0]} exited {r.returncode}:\n{tail}")


def vllm_bench(
    url: str, model_dir: Path, out: Path, concurrency: int = 1, detailed: bool = True
) -> list[str]:
    """`vllm bench serve` at `concurrency` with random prompts of PROMPT tokens and OUTPUT tokens (ignore_eos),
    the result saved with per-request arrays; returns the command line."""
    name = f"vllm-bench-c{concurrency}.json"
    argv = [
        str(vllm_executable()),
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--base-url",
        url,
        "--model",
        "tiny",
        "--tokenizer",
        str(model_dir),
        "--dataset-name",
        "random",
        "--random-input-len",
        str(PROMPT),
        "--random-output-len",
        str(OUTPUT),
        "--num-prompts",
        str(REQUESTS),
        "--max-concurrency",
        str(concurrency),
        "--ignore-eos",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--save-result",
        *(["--save-detailed"] if detailed else []),
        "--result-dir",
        str(out),
        "--result-filename",
        name,
        "--disable-tqdm",
    ]
    _run(argv, out / f"{name}.log", out)
    return argv
