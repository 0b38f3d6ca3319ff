"""Test support for the llama.cpp lane: a `python -m llama_cpp.server` subprocess and an independent client.

The client here is deliberately NOT labkit's: it is plain `http.client`, written for the tests, so that it
can serve as the oracle labkit's decode and prefill numbers are checked against (issue 8). It stamps each
SSE line when `readline` returns it, counts non-empty content chunks as tokens (exact with the tiny model,
which emits one clean ASCII token per chunk), and applies the textbook formulas:
    decode  = (N - 1) / (t_last - t_first)
    prefill = P / (t_first - t_send)          P = prompt tokens as the server counts them
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.workers import free_port as sim_free_port

PORT_RANGE = (18400, 18500)  # this lane's test ports
# As the recipe: one decode thread (two on a 2-core host thrash at ggml's barriers whenever the client runs,
# so decode turns bimodal), two prefill threads. benchmarks/bench_llamacpp_agreement.py measured it.
DECODE_THREADS = ("--n_threads", "1", "--n_threads_batch", "2")
NS = 1_000_000_000


def free_port(lo: int = PORT_RANGE[0] + 10, hi: int = PORT_RANGE[1]) -> int:
    """A port in our range nobody listens on right now."""
    return sim_free_port(lo, hi)


# --------------------------------------------------------------------------------------------------
# The server process


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    stdout: Path
    stderr: Path
    argv: list[str]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stderr_text(self) -> str:
        return self.stderr.read_text(errors="replace")

    def stdout_text(self) -> str:
        return self.stdout.read_text(errors="replace")

    def stop(self, wait: float = 10.0) -> int | None:
        """SIGTERM by PID, then SIGKILL if it lingers (uvicorn takes 1.5-2 s to shut down)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def start_server(
    model: Path,
    logdir: Path,
    *,
    n_ctx: int = 16384,
    extra: tuple[str, ...] = (),
    port: int | None = None,
    timeout: float = 60.0,
) -> Server:
    """Launch the server on a free port of our range and wait for the first 200 on /v1/models."""
    port = port or free_port()
    logdir.mkdir(parents=True, exist_ok=True)
    out, err = logdir / f"server-{port}.out", logdir / f"server-{port}.err"
    argv = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        "tiny",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        *DECODE_THREADS,
        "--interrupt_requests",
        "False",
        *extra,
    ]
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL)
    server = Server(proc, port, out, err, argv)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"llama_cpp.server exited with {proc.returncode}:\n{server.stderr_text()[-3000:]}"
            )
        try:
            status, _ = get(port, "/v1/models", timeout=2)
            if status == 200:
                return server
        except OSError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"llama_cpp.server not ready on port {port} after {timeout} s")


# --------------------------------------------------------------------------------------------------
# Plain HTTP


def get(port: int, path: str, timeout: float = 30) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def post(port: int, path: str, body: dict, timeout: float = 120) -> tuple[int, dict | str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = conn.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw.decode(errors="replace")
    finally:
        conn.close()


def count_tokens(port: int, text: str) -> int:
    status, data = post(port, "/extras/tokenize/count", {"input": text})
    assert status == 200 and isinstance(data, dict), (status, data)
    return int(data["count"])


@dataclass
class Stream:
    """One streamed request as the oracle saw it (times: perf_counter_ns)."""

    status: int = 0
    t_send: int = 0
    t_hdr: int = 0
    t_end: int = 0
    chunk_t: list[int] = field(default_factory=list)  # non-empty content chunks
    texts: list[str] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)  # every parsed data: event
    comments: list[str] = field(default_factory=list)  # SSE comment lines (": ping - ...")
    done: bool = False  # saw data: [DONE]
    finish_reason: str | None = None
    raw: bytes = b""
    error: str = ""

    @property
    def n(self) -> int:
        return len(self.chunk_t)

    @property
    def t_first(self) -> int | None:
        return self.chunk_t[0] if self.chunk_t else None

    @property
    def t_last(self) -> int | None:
        return self.chunk_t[-1] if self.chunk_t else None

    @property
    def ttft(self) -> float:
        return (self.chunk_t[0] - self.t_send) / NS

    @property
    def decode_tps(self) -> float:
        return (self.n - 1) / ((self.chunk_t[-1] - self.chunk_t[0]) / NS)

    def prefill_tps(self, prompt_tokens: int) -> float:
        return prompt_tokens / self.ttft


def stream(
    port: int,
    body: dict,
    api: str = "chat",
    timeout: float = 300,
    keep_raw: bool = False,
    cancel: threading.Event | None = None,
    on_comment: Callable[[str], None] | None = None,
) -> Stream:
    """POST a streamed request and stamp every SSE line on arrival; JSON is parsed after the stream, so the
    client's own CPU use per chunk stays small (on a 2-core box the server competes with it).

    A set `cancel` event closes the connection early (the server then drops the request); `on_comment`
    sees each SSE comment line as it arrives."""
    path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
    payload = json.dumps({**body, "stream": True})
    res = Stream()
    lines: list[tuple[int, bytes]] = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        res.t_send = time.perf_counter_ns()
        conn.request(
            "POST", path, payload, {"Content-Type": "application/json", "Accept": "text/event-stream"}
        )
        resp = conn.getresponse()
        res.t_hdr = time.perf_counter_ns()
        res.status = resp.status
        while True:
            line = resp.readline()
            now = time.perf_counter_ns()
            if keep_raw:
                res.raw += line
            if not line:
                break
            if line.startswith(b":"):
                text = line.decode().rstrip("\r\n")
                res.comments.append(text)
                if on_comment is not None:
                    on_comment(text)
            elif line.startswith(b"data:"):
                lines.append((now, line))
                if line.startswith(b"data: [DONE]"):
                    break
            if cancel is not None and cancel.is_set():
                break
    except (OSError, http.client.HTTPException) as e:
        res.error = f"{type(e).__name__}: {e}"
    finally:
        res.t_end = time.perf_counter_ns()
        conn.close()
    for now, line in lines:
        data = line[5:].strip()
        if data == b"[DONE]":
            res.done = True
            break
        ev = json.loads(data)
        res.events.append(ev)
        ch = (ev.get("choices") or [{}])[0]
        if ch.get("finish_reason"):
            res.finish_reason = ch["finish_reason"]
        piece = _piece(ev, api)
        if piece:
            res.chunk_t.append(now)
            res.texts.append(piece)
    return res


def _piece(ev: dict, api: str) -> str:
    ch = (ev.get("choices") or [{}])[0]
    return ((ch.get("delta") or {}).get("content") if api == "chat" else ch.get("text")) or ""


# --------------------------------------------------------------------------------------------------
# Prompts of a target length, nonce first (no KV prefix reuse between requests)


def filler_text() -> str:
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    return (root / "pydoc_data" / "topics.py").read_text(encoding="utf-8")


def fitted_prompt(port: int, target: int, text: str, offset: int) -> tuple[str, int]:
    """(prompt, server token count) with a unique marker first and about `target` tokens of `text`."""
    nonce = f"[{uuid.uuid4().hex[:12]}] "
    chars = int(target * 3.0)
    for _ in range(8):
        body = (text * (1 + (offset + chars) // len(text)))[offset : offset + chars]
        prompt = nonce + body
        n = count_tokens(port, prompt)
        if abs(n - target) <= max(2, target // 200):
            return prompt, n
        chars = max(16, int(chars * target / n))
    return prompt, n


def fitted_words(port: int, target: int, make: Callable[[int], str]) -> tuple[str, int]:
    """(prompt, server token count) for `make(n_words)` within 0.5% of `target`, by secant steps on the
    word count: the same prompt text labkit sends, sized by the oracle's own calls to the server."""
    words, seen = max(1, int(target * 0.75)), {}
    for _ in range(12):
        prompt = make(words)
        n = count_tokens(port, prompt)
        seen[words] = (prompt, n)
        if abs(n - target) <= max(2, target // 200):
            return prompt, n
        words = max(1, words + round((target - n) * words / n))
        if words in seen:
            break
    prompt, n = min(seen.values(), key=lambda pn: abs(pn[1] - target))
    return prompt, n


def chat_overhead(port: int) -> int:
    """Template tokens the chat format adds around one user message (usage vs local count)."""
    prompt = f"[{uuid.uuid4().hex[:12]}] how many tokens is this"
    status, data = post(
        port, "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}], "max_tokens": 1}
    )
    assert status == 200, data
    return int(data["usage"]["prompt_tokens"]) - count_tokens(port, prompt)


def chat_body(prompt: str, max_tokens: int, **extra) -> dict:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
        **extra,
    }


def median(xs: list[float]) -> float:
    return statistics.median(xs)


LOG_N_CTX = re.compile(r"n_ctx\s+=\s+(\d+)")
LOG_KV = re.compile(r"llama_kv_cache\w*:\s+size =\s+([\d.]+) MiB \(\s*(\d+) cells")
LOG_READY = re.compile(r"Uvicorn running on (\S+)")
LOG_PROMPT_EVAL = re.compile(r"prompt eval time =\s+([\d.]+) ms /\s+(\d+) tokens")


def have_llama_cpp() -> bool:
    try:
        import llama_cpp  # noqa: F401
    except Exception:  # noqa: BLE001 — a broken build (missing shared library) counts as absent
        return False
    return True


def env_without_proxy() -> dict:
    return {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
