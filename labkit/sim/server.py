"""The simulator's HTTP side: boot sequence with engine-style log lines, then a hand-written asyncio HTTP/1.1
server (keep-alive, chunked SSE streaming) driving labkit.sim.engine.

Stdlib only. The event loop uses a select()-based selector because select() takes microsecond timeouts
(epoll rounds up to whole milliseconds), which keeps token emission within ~0.1 ms of its schedule.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import socket
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from urllib.parse import parse_qs, urlsplit

from labkit.sim import openai, tokenizer
from labkit.sim.config import SimConfig
from labkit.sim.engine import Engine
from labkit.sim.metrics import render

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large",
            500: "Internal Server Error", 501: "Not Implemented", 503: "Service Unavailable"}
_WORD_BYTES = [json.dumps(" " + w)[1:-1].encode() for w in tokenizer.WORDS]
MAX_HEADER = 65536


# ---------------------------------------------------------------------------------------------------
# Boot log


class BootLog:
    """Writes engine-style log lines to stderr, flushed per line so a tailing harness sees them live."""

    def __init__(self, cfg: SimConfig, stream=None):
        self.cfg = cfg
        self.stream = stream or sys.stderr

    def line(self, msg: str, level: str = "INFO", where: str = "sim.py:1") -> None:
        now = datetime.now()
        if self.cfg.flavor == "vllm":
            text = f"{level} {now:%m-%d %H:%M:%S} [{where}] {msg}"
        else:
            text = f"[{now:%Y-%m-%d %H:%M:%S}] {msg}"
        self.stream.write(text + "\n")
        self.stream.flush()

    def uvicorn(self, msg: str) -> None:
        self.stream.write(f"INFO:     {msg}\n")
        self.stream.flush()


def _boot_crash(cfg: SimConfig, log: BootLog) -> None:
    """Fault: die during weight loading with the configured fatal line (exit status 1)."""
    time.sleep(cfg.boot_weights_s / 2)
    log.line(cfg.fault_boot_crash, "ERROR", "core.py:1010")
    log.line("EngineCore failed to start.", "ERROR", "core.py:1016")
    sys.exit(1)


def boot_vllm(cfg: SimConfig, log: BootLog) -> None:
    """vLLM 0.33 boot lines with the configured delays; no socket exists during any of this."""
    log.line(f"vLLM server version {cfg.version}, serving model {cfg.model_path} "
             f"(labkit.sim simulated engine{', preset ' + cfg.preset if cfg.preset else ''})", where="startup.py:38")
    log.line(f"Starting to load model {cfg.model_path}...", where="gpu_model_runner.py:4979")
    if cfg.fault_boot_crash:
        _boot_crash(cfg, log)
    t0 = time.perf_counter()
    time.sleep(cfg.boot_weights_s)
    took = time.perf_counter() - t0
    log.line(f"Loading weights took {took:.2f} seconds", where="default_loader.py:507")
    log.line(f"Model loading took {round(cfg.weights_gib, 2)} GiB memory and {took + 0.01:.6f} seconds",
             where="gpu_model_runner.py:5089")
    t1 = time.perf_counter()
    time.sleep(cfg.boot_init_s)
    kv_gib = cfg.kv_cache_tokens * 4096 / 2**30  # nominal bytes per token, for the log line only
    log.line(f"Available KV cache memory: {kv_gib:.2f} GiB", where="gpu_worker.py:773")
    conc = cfg.kv_cache_tokens / cfg.max_model_len
    if cfg.kv_log_form == "one-line":
        log.line(f"GPU KV cache size: {cfg.kv_cache_tokens:,} tokens, Maximum concurrency for "
                 f"{cfg.max_model_len:,} tokens per request: {conc:.2f}x", where="kv_cache_utils.py:1136")
    else:
        log.line(f"GPU KV cache size: {cfg.kv_cache_tokens:,} tokens", where="kv_cache_utils.py:1087")
        log.line(f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: {conc:.2f}x",
                 where="kv_cache_utils.py:1091")
    log.line(f"init engine (profile, create kv cache, warmup model) took {time.perf_counter() - t1:.2f} s",
             where="core.py:391")
    log.line("Supported tasks: ['generate']", where="entry.py:135")


def boot_sglang_load(cfg: SimConfig, log: BootLog) -> None:
    """SGLang lines up to the scheduler summary (HTTP comes up after this, before warmup)."""
    log.line(f"server_args=ServerArgs(model_path='{cfg.model_path}', served_model_name='{cfg.model_name}', "
             f"simulated='labkit.sim {cfg.version}{' preset ' + cfg.preset if cfg.preset else ''}')")
    avail = cfg.weights_gib + 20.0
    log.line(f"Load weight begin. avail mem={avail:.2f} GB")
    if cfg.fault_boot_crash:
        _boot_crash(cfg, log)
    t0 = time.perf_counter()
    time.sleep(cfg.boot_weights_s)
    log.line(f"Load weight end. elapsed={time.perf_counter() - t0:.2f} s, type=SimForCausalLM, "
             f"avail mem={avail - cfg.weights_gib:.2f} GB, mem usage={cfg.weights_gib:.2f} GB.")
    time.sleep(cfg.boot_init_s)
    kv_gb = cfg.kv_cache_tokens * 4096 / 1e9
    log.line(f"KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: {cfg.kv_cache_tokens}, "
             f"KV size: {kv_gb:.2f} GB")
    log.line(f"max_total_num_tokens={cfg.kv_cache_tokens}, chunked_prefill_size={cfg.prefill_chunk_tokens or -1}, "
             f"max_prefill_tokens=16384, max_running_requests=256, context_len={cfg.max_model_len}, "
             f"available_gpu_mem=10.00 GB")


# ---------------------------------------------------------------------------------------------------
# HTTP


def _head(status: int, ctype: str, length: int | None, keep_alive: bool, extra: str = "") -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", "server: uvicorn", f"content-type: {ctype}"]
    lines.append(f"content-length: {length}" if length is not None else "transfer-encoding: chunked")
    if not keep_alive:
        lines.append("connection: close")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _frame(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


class App:
    """Server state shared by all connections: config, engine, readiness, fault counters."""

    def __init__(self, cfg: SimConfig, log: BootLog):
        self.cfg = cfg
        self.log = log
        self.engine = Engine(cfg)
        self.wall_boot = time.time()
        self.created = int(self.wall_boot)
        self.ready = cfg.flavor == "vllm"
        self._ids = 0

    def new_id(self, endpoint: str) -> str:
        self._ids += 1
        return f"{'chatcmpl' if endpoint == 'chat' else 'cmpl'}-sim{self._ids:06d}{uuid.uuid4().hex[:8]}"

    # simple, synchronous routes -> (status, content type, body)
    def simple(self, method: str, path: str, query: str, body: bytes) -> tuple[int, str, bytes] | None:
        cfg, eng = self.cfg, self.engine
        js = "application/json"
        if path == "/health" and method == "GET":
            return (200, js, b"") if self.ready else (503, js, b"")
        if path == "/v1/models" and method == "GET":
            return 200, js, openai.models(cfg, self.created)
        if path == "/version" and method == "GET":
            return 200, js, json.dumps({"version": cfg.version, "simulated": True, "engine": "labkit.sim",
                                        "flavor": cfg.flavor, "preset": cfg.preset or None}).encode()
        if path == "/metrics" and method == "GET":
            return 200, "text/plain; version=0.0.4; charset=utf-8", render(eng, self.wall_boot).encode()
        if path == "/tokenize" and method == "POST":
            return 200, js, openai.tokenize(cfg, body)
        if path == "/sim/requests" and method == "GET":
            since = int(parse_qs(query).get("since", ["0"])[0])
            recs = [r.to_dict() for r in eng.records if r.index > since]
            return 200, js, json.dumps({"clock": "time.perf_counter (CLOCK_MONOTONIC)", "boot": eng.t_boot,
                                        "now": time.perf_counter(), "config": asdict(cfg),
                                        "requests": recs}).encode()
        if cfg.flavor == "vllm" and path == "/reset_prefix_cache" and method == "POST":
            eng.flush_cache()
            return 200, js, b""
        if cfg.flavor == "sglang":
            if path in ("/server_info", "/get_server_info") and method == "GET":
                return 200, js, json.dumps(self.server_info()).encode()
            if path in ("/model_info", "/get_model_info") and method == "GET":
                return 200, js, json.dumps({"model_path": cfg.model_path, "served_model_name": cfg.model_name,
                                            "is_generation": True, "simulated": True}).encode()
            if path == "/flush_cache" and method in ("GET", "POST"):
                if eng.flush_cache():
                    return 200, "text/plain", b"Cache flushed.\n"
                return 400, "text/plain", b"Cache not flushed. Please check if the server is idle.\n"
        return None

    def server_info(self) -> dict:
        cfg, eng = self.cfg, self.engine
        state: dict = {"memory_usage": {"weight": cfg.weights_gib, "kvcache": cfg.kv_cache_tokens * 4096 / 1e9,
                                        "token_capacity": cfg.kv_cache_tokens, "graph": 0.5},
                       "last_gen_throughput": cfg.decode_tps}
        if cfg.spec_on:
            state["avg_spec_accept_length"] = eng.avg_spec_accept_length
        return {"model_path": cfg.model_path, "served_model_name": cfg.model_name, "host": cfg.host,
                "port": cfg.port, "speculative_algorithm": cfg.spec_method.upper() or None,
                "speculative_num_draft_tokens": cfg.spec_k + 1 if cfg.spec_on else None,
                "max_total_num_tokens": cfg.kv_cache_tokens, "max_req_input_len": cfg.max_model_len - 1,
                "version": cfg.version, "simulated": True, "startup_time": self.wall_boot,
                "internal_states": [state]}


class HttpConn(asyncio.Protocol):
    """One client connection: parses requests in order, answers simple routes inline, streams generations."""

    def __init__(self, app: App):
        self.app = app
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.closed = False
        self._drain: asyncio.Future | None = None
        self._closed_fut: asyncio.Future | None = None

    # asyncio.Protocol
    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.closed = True
        for fut in (self._drain, self._closed_fut):
            if fut is not None and not fut.done():
                fut.set_result(None)

    def pause_writing(self) -> None:
        self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._process()

    # request handling
    def _process(self) -> None:
        while not self.busy and not self.closed:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self.buf) > MAX_HEADER:
                    self._reply(413, "application/json", b"", False)
                return
            try:
                head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
                method, target, version = head[0].split(" ", 2)
                headers = {}
                for h in head[1:]:
                    k, _, v = h.partition(":")
                    headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0"))
            except ValueError:
                self._reply(400, "application/json", b'{"error": "malformed request"}', False)
                return
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self._reply(501, "application/json", b'{"error": "chunked request bodies are not supported"}',
                            False)
                return
            total = end + 4 + length
            if len(self.buf) < total:
                return
            body = bytes(self.buf[end + 4:total])
            del self.buf[:total]
            conn = headers.get("connection", "").lower()
            keep = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
            self._dispatch(method, target, body, keep)

    def _reply(self, status: int, ctype: str, body: bytes, keep: bool) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.write(_head(status, ctype, len(body), keep) + body)
        if not keep:
            self.transport.close()
            self.closed = True

    def _dispatch(self, method: str, target: str, body: bytes, keep: bool) -> None:
        app = self.app
        parts = urlsplit(target)
        path = parts.path
        try:
            if path in ("/v1/chat/completions", "/v1/completions"):
                if method != "POST":
                    raise openai.ApiError(405, "Method Not Allowed")
                endpoint = "chat" if path == "/v1/chat/completions" else "completions"
                req = openai.parse_generation(app.cfg, endpoint, body)
                self.busy = True
                task = asyncio.get_running_loop().create_task(self._generate(req, keep))
                task.add_done_callback(self._after_task)
                return
            res = app.simple(method, path, parts.query, body)
        except openai.ApiError as e:
            self._reply(e.status, "application/json", e.body(), keep)
            return
        if res is None:
            self._reply(404, "application/json", b'{"detail": "Not Found"}', keep)
        else:
            self._reply(res[0], res[1], res[2], keep)

    def _after_task(self, task: asyncio.Task) -> None:
        self.busy = False
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            self.app.log.line(f"request failed: {exc!r}", "ERROR")
            if self.transport is not None:
                self.transport.close()
            return
        if not self.closed:
            self._process()

    async def _write(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[union-attr]
        if self._drain is not None:
            await self._drain

    async def _wait_closed(self) -> None:
        if not self.closed:
            self._closed_fut = asyncio.get_running_loop().create_future()
            await self._closed_fut

    async def _generate(self, req: openai.GenRequest, keep: bool) -> None:
        app, cfg, eng = self.app, self.app.cfg, self.app.engine
        loop = asyncio.get_running_loop()
        clock = time.perf_counter
        number = eng.n_requests + 1
        if number == cfg.fault_http500_request:
            eng.n_requests += 1  # the failed request still takes its number
            err = openai.ApiError(500, f"simulated fault: HTTP 500 on request {number}", "InternalServerError")
            self._reply(500, "application/json", err.body(), keep)
            return
        req_id = app.new_id(req.endpoint)
        rec = eng.admit(req.ids, req.max_tokens, req.min_tokens, req.ignore_eos, req.endpoint, req.stream, req_id)
        exit_at = cfg.fault_exit_after_tokens if rec.index == cfg.fault_exit_request else -1
        stall_at = cfg.fault_stall_after_tokens if rec.index == cfg.fault_stall_request else -1
        hold = rec.index == cfg.fault_hold_request
        held: list[bytes] = []
        render_ = openai.StreamRenderer(cfg, req.endpoint, req_id, app.created, rec.prompt_tokens,
                                        rec.cached_tokens, req.continuous_usage) if req.stream else None
        if render_ is not None:
            self.transport.write(_head(200, "text/event-stream; charset=utf-8", None, keep))  # type: ignore
        words = _WORD_BYTES
        nw = len(words)
        wbase = rec.index * 13
        text_parts: list[bytes] = []
        eos_at = rec.eos_at
        target = rec.t_prefill_end
        first = True
        try:
            while True:
                # wait for the absolute target time (select() timeout has microsecond resolution)
                delay = target - clock()
                if delay > 0:
                    fut = loop.create_future()
                    loop.call_at(loop.time() + delay, fut.set_result, None)
                    await fut
                else:
                    await asyncio.sleep(0)  # behind schedule: emit now, but let other streams run
                if self.closed:
                    eng.finish(rec, "aborted", "abort")
                    return
                now = clock()
                before = rec.completion_tokens
                n = eng.first_token(rec, now, target) if first else eng.step(rec, now, target)
                done = rec.completion_tokens >= rec.target_tokens
                if eos_at is not None and before < eos_at <= rec.completion_tokens:
                    chunk = b"".join(words[(wbase + i) % nw] for i in range(before, eos_at - 1))
                else:
                    chunk = b"".join(words[(wbase + i) % nw] for i in range(before, before + n)) if n > 1 \
                        else words[(wbase + before) % nw]
                if render_ is not None:
                    if done:
                        reason = "stop" if eos_at is not None and rec.completion_tokens >= eos_at else "length"
                        out = render_.last(chunk, rec.completion_tokens, reason)
                    else:
                        out = render_.tokens(chunk, rec.completion_tokens)
                    if first and req.endpoint == "chat":
                        self.transport.write(_frame(render_.role()))  # type: ignore[union-attr]
                    if hold and before >= cfg.fault_hold_from:
                        held.append(_frame(out))
                        if done or 0 < cfg.fault_hold_until <= rec.completion_tokens:
                            hold = False
                            await self._write(b"".join(held))
                    else:
                        await self._write(_frame(out))
                else:
                    text_parts.append(chunk)
                first = False
                if done:
                    break
                if exit_at >= 0 and rec.completion_tokens >= exit_at:
                    app.log.line(f"EngineCore encountered a fatal error (simulated fault: exit after "
                                 f"{rec.completion_tokens} tokens of request {rec.index})", "ERROR", "core.py:1120")
                    eng.finish(rec, "exited", "abort")
                    os._exit(3)
                if stall_at >= 0 and rec.completion_tokens >= stall_at:
                    eng.finish(rec, "stalled", None)
                    await self._wait_closed()
                    return
                target = eng.next_target(rec, target)
        except asyncio.CancelledError:
            eng.finish(rec, "aborted", "abort")
            raise
        reason = "stop" if eos_at is not None and rec.completion_tokens >= eos_at else "length"
        eng.finish(rec, "finished", reason)
        if render_ is not None:
            tail = b""
            if req.include_usage:
                tail += _frame(render_.usage_chunk(rec.completion_tokens))
            tail += _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
            self.transport.write(tail)  # type: ignore[union-attr]
            if not keep:
                self.transport.close()  # type: ignore[union-attr]
                self.closed = True
        else:
            text = b"".join(text_parts).decode()
            self._reply(200, "application/json",
                        openai.full_response(cfg, req.endpoint, req_id, app.created, text, reason, rec.prompt_tokens,
                                             rec.completion_tokens, rec.cached_tokens), keep)


# ---------------------------------------------------------------------------------------------------
# Entry point


def _listen(cfg: SimConfig) -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when proto is IPPROTO_TCP;
    # with proto 0, Nagle + the client's delayed ACK held chunks back ~40 ms on reused keep-alive connections.
    sock = socket.socket(socket.AF_INET6 if ":" in cfg.host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((cfg.host, cfg.port))
    sock.listen(256)
    sock.setblocking(False)
    return sock


def serve(cfg: SimConfig, on_ready: Callable[[int], None] | None = None) -> int:
    """Boot (log lines, delays, faults), then serve until SIGINT/SIGTERM. Returns the exit status."""
    log = BootLog(cfg)
    if cfg.flavor == "vllm":
        boot_vllm(cfg, log)
    else:
        boot_sglang_load(cfg, log)
    try:
        sock = _listen(cfg)
    except OSError as e:
        log.line(f"cannot listen on {cfg.host}:{cfg.port}: {e}", "ERROR")
        return 1
    port = sock.getsockname()[1]
    cfg.port = port
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    asyncio.set_event_loop(loop)
    app = App(cfg, log)
    stop = loop.create_future()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
    server = loop.run_until_complete(loop.create_server(lambda: HttpConn(app), sock=sock))
    if cfg.flavor == "vllm":
        log.line(f"Starting vLLM server on http://{cfg.host}:{port}", where="launcher.py:188")
    log.uvicorn(f"Started server process [{os.getpid()}]")
    log.uvicorn("Waiting for application startup.")
    log.uvicorn("Application startup complete.")
    if cfg.flavor == "sglang":
        log.uvicorn(f"Uvicorn running on http://{cfg.host}:{port} (Press CTRL+C to quit)")

        def _ready() -> None:
            app.ready = True
            log.line("The server is fired up and ready to roll!")

        loop.call_later(cfg.sglang_warmup_s, _ready)
    if on_ready is not None:
        on_ready(port)
    try:
        loop.run_until_complete(stop)
    finally:
        log.uvicorn("Shutting down")
        server.close()
        loop.close()
    return 0
