"""Result files written by the real benchmark tools against one real vLLM CPU server, for the import tests.

`vllm bench serve` ships with the vLLM CPU build; the other tools (llama-benchy, guidellm, aiperf, SGLang's
bench_serving) live in venvs of their own that the test setup makes under <venv>/tools/<name> (their
dependencies clash with vLLM's). Each tool runs offline: the tokenizer is the tiny model's folder, no hub. A tool
that is not installed is absent from the result, and its tests skip saying so.
"""

from __future__ import annotations

import hashlib
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


def _run(argv: list[str], log: Path, cwd: Path, extra: dict[str, str] | None = None) -> None:
    env = dict(os.environ, **OFFLINE, **(extra or {}))
    with open(log, "wb") as out:
        r = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd, timeout=TOOL_TIMEOUT)
    if r.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"{argv[0]} exited {r.returncode}:\n{tail}")


def vllm_bench(
    url: str, model_dir: Path, out: Path, concurrency: int = 1, prompt: int = PROMPT, output: int = OUTPUT
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
        str(prompt),
        "--random-output-len",
        str(output),
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
        "--save-detailed",
        "--result-dir",
        str(out),
        "--result-filename",
        name,
        "--disable-tqdm",
    ]
    _run(argv, out / f"{name}.log", out)
    return argv


def _tool(root: Path, name: str, exe: str) -> Path | None:
    path = root / name / "bin" / exe
    return path if path.exists() else None


def llama_benchy(
    url: str, model_dir: Path, out: Path, root: Path, home: Path, prompt: int = PROMPT, output: int = OUTPUT
) -> list[str] | None:
    """llama-benchy 0.4 at concurrency 1 and 2 (--exact-tg: exactly OUTPUT tokens), prompts cut from labkit's
    pinned corpus: llama-benchy reads its book from ~/.cache/llama-benchy/<md5(url)>.txt before any download,
    so a private HOME holds it."""
    exe = _tool(root, "llama-benchy", "llama-benchy")
    if exe is None:
        return None
    book = "local://labkit-corpus"
    cache = home / ".cache" / "llama-benchy"
    cache.mkdir(parents=True, exist_ok=True)
    corpus = Path(__file__).resolve().parents[2] / "labkit" / "measure" / "prompt" / "corpus"
    text = "\n\n".join(p.read_text() for p in sorted(corpus.glob("*.txt")))
    (cache / f"{hashlib.md5(book.encode()).hexdigest()}.txt").write_text(text * 4)
    name = "llama-benchy.json"
    argv = [str(exe), "--base-url", f"{url}/v1", "--model", "tiny", "--tokenizer", str(model_dir)]
    argv += ["--book-url", book, "--pp", str(prompt), "--tg", str(output), "--depth", "0"]
    argv += ["--concurrency", "1", "2", "--runs", "3", "--exact-tg", "--skip-coherence"]
    argv += ["--format", "json", "--save-result", str(out / name)]
    _run(argv, out / f"{name}.log", out, {"HOME": str(home)})
    return argv


def guidellm(
    url: str, model_dir: Path, out: Path, root: Path, prompt: int = PROMPT, output: int = OUTPUT
) -> list[str] | None:
    """guidellm 0.8, synchronous (one request at a time), synthetic prompts of PROMPT and OUTPUT tokens."""
    exe = _tool(root, "guidellm", "guidellm")
    if exe is None:
        return None
    name = "guidellm.json"
    argv = [str(exe), "run", "--backend", f"kind=openai_http,target={url},model=tiny"]
    argv += ["--tokenizer", f"kind=huggingface_auto,model={model_dir}", "--profile", "kind=synchronous"]
    argv += ["--constraint", f"kind=max_requests,count={REQUESTS}"]
    argv += ["--data", f"kind=synthetic_text,prompt_tokens={prompt},output_tokens={output}"]
    argv += ["--output", f"kind=json,path={out / name}", "--disable-console-interactive"]
    _run(argv, out / f"{name}.log", out)
    return argv


def aiperf(
    url: str, model_dir: Path, out: Path, root: Path, home: Path, prompt: int = PROMPT, output: int = OUTPUT
) -> list[str] | None:
    """aiperf 0.13 at concurrency 1 with server token counts. Offline, aiperf 0.13 takes a local tokenizer folder
    for a hub repo id and fails ("Repo id must be in the form ..."), so the folder is given as a repo
    `local/tiny-llama` in a private HF cache."""
    exe = _tool(root, "aiperf", "aiperf")
    if exe is None:
        return None
    snapshot = home / "hub" / "models--local--tiny-llama"
    commit = "0" * 40
    (snapshot / "refs").mkdir(parents=True, exist_ok=True)
    (snapshot / "refs" / "main").write_text(commit)
    files = snapshot / "snapshots" / commit
    files.mkdir(parents=True, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json"):
        if (model_dir / f).exists():
            (files / f).write_bytes((model_dir / f).read_bytes())
    argv = [str(exe), "profile", "--model", "tiny", "--url", url, "--endpoint-type", "chat", "--streaming"]
    argv += ["--tokenizer", "local/tiny-llama", "--concurrency", "1", "--request-count", str(REQUESTS)]
    argv += ["--isl", str(prompt), "--osl", str(output), "--extra-inputs", "ignore_eos:true"]
    argv += [
        "--use-server-token-count",
        "--no-gpu-telemetry",
        "--artifact-dir",
        str(out / "aiperf"),
        "--ui",
        "none",
    ]
    _run(argv, out / "aiperf.log", out, {"HF_HOME": str(home)})
    return argv


def sglang_bench(
    url: str, model_dir: Path, out: Path, root: Path, prompt: int = PROMPT, output: int = OUTPUT
) -> list[str] | None:
    """SGLang 0.5's bench_serving on the chat endpoint, random token-id prompts (no dataset file), all lengths
    fixed. Not installed by the test setup (tests/support/fixtures/imports/README.md says why): it runs only
    where a venv `sglang` stands under the tools root."""
    python = _tool(root, "sglang", "python")
    if python is None:
        return None
    name = "sglang-bench.jsonl"
    argv = [str(python), "-m", "sglang.bench_serving", "--backend", "vllm-chat", "--base-url", url]
    argv += ["--model", str(model_dir), "--served-model-name", "tiny", "--tokenizer", str(model_dir)]
    argv += [
        "--dataset-name",
        "random-ids",
        "--random-input-len",
        str(prompt),
        "--random-output-len",
        str(output),
    ]
    argv += ["--random-range-ratio", "1", "--num-prompts", str(REQUESTS), "--max-concurrency", "1"]
    argv += ["--output-file", str(out / name)]
    _run(argv, out / f"{name}.log", out)
    return argv
