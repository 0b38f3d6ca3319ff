"""One client connection of the simulator's hand-written asyncio HTTP/1.1 server (keep-alive, in-order requests).

Requests are parsed here; simple routes are answered inline (labkit.sim.routes), generations run as one task
at a time per connection (labkit.sim.generate), which writes through `write` so a slow reader applies
backpressure.
"""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

from labkit.sim import openai
from labkit.sim.generate import generate
from labkit.sim.routes import App
from labkit.sim.wire import head

MAX_HEADER = 65536


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
    def connection_made(self, transport) -> None:
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
                    self.reply(413, "application/json", b"", False)
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
                self.reply(400, "application/json", b'{"error": "malformed request"}', False)
                return
            if "chunked" in headers.get("transfer-encoding", "").lower():
                self.reply(
                    501, "application/json", b'{"error": "chunked request bodies are not supported"}', False
                )
                return
            total = end + 4 + length
            if len(self.buf) < total:
                return
            body = bytes(self.buf[end + 4 : total])
            del self.buf[:total]
            conn = headers.get("connection", "").lower()
            keep = conn != "close" if version == "HTTP/1.1" else conn == "keep-alive"
            self._dispatch(method, target, body, keep)

    def reply(self, status: int, ctype: str, body: bytes, keep: bool) -> None:
        if self.closed or self.transport is None:
            return
        self.transport.write(head(status, ctype, len(body), keep) + body)
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
                task = asyncio.get_running_loop().create_task(generate(self, req, keep))
                task.add_done_callback(self._after_task)
                return
            res = app.simple(method, path, parts.query, body)
        except openai.ApiError as e:
            self.reply(e.status, "application/json", e.body(), keep)
            return
        if res is None:
            self.reply(404, "application/json", b'{"detail": "Not Found"}', keep)
        else:
            self.reply(res[0], res[1], res[2], keep)

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

    async def write(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[union-attr]
        if self._drain is not None:
            await self._drain

    async def wait_closed(self) -> None:
        if not self.closed:
            await self.closed_future()

    def closed_future(self) -> asyncio.Future:
        """Done when the client has gone (at once if it has): a step-mode request waits on it and its tokens."""
        if self._closed_fut is None:
            self._closed_fut = asyncio.get_running_loop().create_future()
            if self.closed:
                self._closed_fut.set_result(None)
        return self._closed_fut
