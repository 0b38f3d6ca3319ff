"""The simulator's HTTP side: boot sequence with engine-style log lines (labkit.sim.boot), then a hand-written
asyncio HTTP/1.1 server (keep-alive, chunked SSE streaming; labkit.sim.connection) driving labkit.sim.engine.

Stdlib only. The event loop uses a select()-based selector because select() takes microsecond timeouts
(epoll rounds up to whole milliseconds), which keeps token emission within ~0.1 ms of its schedule.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import signal
import socket
from collections.abc import Callable

from labkit.sim.boot import SimBootLog, boot_sglang_load, boot_vllm
from labkit.sim.config import SimConfig
from labkit.sim.connection import HttpConn
from labkit.sim.routes import App


def _listen(cfg: SimConfig) -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when proto is IPPROTO_TCP;
    # with proto 0, Nagle + the client's delayed ACK held chunks back ~40 ms on reused keep-alive connections.
    sock = socket.socket(
        socket.AF_INET6 if ":" in cfg.host else socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP
    )
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((cfg.host, cfg.port))
    sock.listen(256)
    sock.setblocking(False)
    return sock


def serve(cfg: SimConfig, on_ready: Callable[[int], None] | None = None) -> int:
    """Boot (log lines, delays, faults), then serve until SIGINT/SIGTERM. Returns the exit status."""
    log = SimBootLog(cfg)
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
        loop.add_signal_handler(sig, lambda: None if stop.done() else stop.set_result(None))
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
