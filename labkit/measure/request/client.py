"""Streaming client: one keep-alive OpenAI SDK client, a monotonic stamp on every network read, token counts.

What is stamped (all `time.perf_counter_ns()`):
- `t_send`: in the HTTP client's request hook, i.e. after the request is built and just before its bytes go to
  the connection (no retries: `max_retries=0`, a retried request would corrupt every timing);
- `t_hdr`: in the response hook, when the status line and headers have been received;
- chunk stamps: taken the moment a network read returns bytes, before the SSE lines are split or any JSON is
  parsed. Several SSE events delivered by one read share that stamp (they did arrive together).

Transport. The OpenAI SDK (AsyncOpenAI) owns the keep-alive connection pool and the API key. By default the
stream itself is POSTed through that same pool without the SDK's per-request machinery (`transport="direct"`):
measured here, the SDK path spends ~1.5 ms building each request (~10 ms on the first), which staggers the
sends of a "lockstep" c2 pair by ~1.1 ms instead of ~0.4 ms. Both paths are stamped identically (t_send in the
request hook, so the build time never counts as TTFT); `transport="sdk"` streams through
`with_streaming_response`, and benchmarks/bench_accuracy.py measures both.

HTTP backend: the SDK's aiohttp client (`openai.DefaultAioHttpClient`, the `openai[aiohttp]` extra) when aiohttp
is installed, else its default httpx client; `LABKIT_HTTP=httpx` forces the latter. Measured at 2,000 chunks/s
on a 2-core host: ~50-60 µs of client CPU per chunk with aiohttp vs ~120-140 µs with httpx (h11 parsing), and
~40 µs with aiohttp on uvloop (labkit.measure.run_bench uses uvloop when installed). The hot loop only stamps
and stores each read; parsing happens after the stream ends.

Token counting and the SSE parsing happen in labkit/measure/request/sse.py, after the stream ended.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from labkit import settings
from labkit.errors import LabkitError
from labkit.measure.request.sse import RawStream, SSEParser, StreamResult
from labkit.recipe import Api

if TYPE_CHECKING:
    import openai


def _have_aiohttp() -> bool:
    """The SDK's aiohttp backend (the openai[aiohttp] extra): half the client CPU per chunk of httpx."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:  # pragma: no cover
        return False
    return True


class EndpointError(LabkitError):
    """An endpoint could not be reached or answered nonsense; names the URL."""

    def __init__(self, url: str, message: str):
        self.url = url
        super().__init__(f"{url}: {message}")


def split_base(url: str) -> tuple[str, str]:
    """(server root, OpenAI API base) from either form: 'http://h:p' or 'http://h:p/v1'."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    root = url[:-3] if url.endswith("/v1") else url
    return root, root + "/v1"


CUT = "cut:"  # how the error of a stream cut for silence (StreamRequest.stall_s) starts
TIMED_OUT = "timeout after"  # how the error of a stream ended by the request timeout starts

# the kinds a failed request's error falls in (`failure_kind`), in the order a level's counts show them
FAILURE_KINDS = ("http_5xx", "reset", "cut", "timeout", "other")
# what a connection the engine refused, reset or dropped mid-stream reads as, through either HTTP backend:
# aiohttp's refusal comes wrapped as httpx's ConnectTimeout ("Cannot connect to host ... Connect call
# failed"), its dropped stream as ReadError ("Response payload is not completed"); httpx's as ConnectError
# ("All connection attempts failed") and RemoteProtocolError ("peer closed connection ...")
_HTTP_5XX = re.compile(r"HTTP 5\d\d\b")  # how an HTTP 5xx answer's error starts (_HTTPError, stream_raw)
_RESET_MARKS = (
    "cannot connect to host",
    "connect call failed",
    "all connection attempts failed",
    "connection refused",
    "connecterror",
    "connection reset",
    "connectionreseterror",
    "server disconnected",
    "remoteprotocolerror",
    "peer closed connection",
    "response payload is not completed",
    "incomplete chunked read",
    "connection lost",
    "broken pipe",
    "readerror:",
    "writeerror:",
)


def failure_kind(error: str) -> str | None:
    """The kind of a request's error as this client writes it (`stream_raw`, recording's validity rules): an
    HTTP 5xx answer (`http_5xx`), a connection refused, reset or dropped (`reset`), a stream cut for silence
    (`cut`), the request timeout (`timeout`), anything else (`other`: a 4xx, a short or unfinished stream);
    None for no error. Pure: the one place a failure is told apart by its text."""
    if not error:
        return None
    if error.startswith(CUT):
        return "cut"
    if error.startswith(TIMED_OUT):
        return "timeout"
    if _HTTP_5XX.match(error):
        return "http_5xx"
    low = error.lower()
    if any(mark in low for mark in _RESET_MARKS):
        return "reset"
    return "other"


@dataclass
class StreamRequest:
    """One generation request. `min_tokens`/`ignore_eos` force the output length (docs/engines.md, "Forcing the output length")."""

    prompt: str
    max_tokens: int
    api: Api = "chat"
    model: str = ""
    min_tokens: int | None = None
    ignore_eos: bool = False
    temperature: float = 0.0
    seed: int | None = None
    timeout: float = 600.0  # whole request, seconds
    # a stream with no network read for this long is cut (a load level's measure.load.stall_s); None: never
    stall_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # a whole conversation (chat only; an agentic session's turn): sent instead of one user message of `prompt`
    messages: list[dict[str, Any]] | None = None

    def chat(self) -> list[dict[str, Any]]:
        """The chat messages this request sends."""
        return self.messages if self.messages is not None else [{"role": "user", "content": self.prompt}]


def api_key_from_env() -> str:
    """The key from LABKIT_API_KEY or OPENAI_API_KEY (labkit.settings); local engines accept anything, so a
    placeholder."""
    return settings.current().api_key or "EMPTY"


class StreamClient:
    """One keep-alive HTTP client shared by the SDK (generation) and plain GET/POST calls (/metrics, ...).

    Create it inside the event loop that will use it (it holds an asyncio.Event)."""

    def __init__(
        self, url: str, *, timeout: float = 600.0, max_connections: int = 64, transport: str = "direct"
    ):
        if transport not in ("direct", "sdk"):
            raise ValueError(f"transport must be 'direct' or 'sdk', got {transport!r}")
        self.root, self.base = split_base(url)
        self.timeout, self.transport = timeout, transport
        # The SDK is imported here, not with the module: the store and report read records without it.
        import openai

        aio = getattr(openai, "DefaultAioHttpClient", None)
        use_aio = aio is not None and _have_aiohttp() and settings.current().http != "httpx"
        self.backend = "aiohttp" if use_aio else "httpx"
        cls = aio if use_aio and aio is not None else openai.DefaultAsyncHttpxClient  # use_aio implies aio
        limits = type(openai.DEFAULT_CONNECTION_LIMITS)(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._http = cls(
            timeout=timeout,
            limits=limits,
            event_hooks={"request": [_stamp_request], "response": [_stamp_response]},
        )
        self._key = api_key_from_env()
        self._streams = 0  # streams open right now
        self._gc_was_enabled = True
        self._idle = asyncio.Event()  # set while no stream is open
        self._idle.set()
        self._sdk = openai.AsyncOpenAI(
            base_url=self.base, api_key=self._key, max_retries=0, timeout=timeout, http_client=self._http
        )
        # Resolve the SDK's lazily imported resources now, not inside the first timed request.
        self._sdk.chat.completions, self._sdk.completions  # noqa: B018

    async def aclose(self) -> None:
        await self._sdk.close()

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------ plain HTTP
    async def get(self, path: str, timeout: float = 30.0) -> tuple[int, str]:
        """(status, body) of GET root+path; raises EndpointError when the server cannot be reached."""
        url = self.root + path
        try:
            r = await self._http.get(url, timeout=timeout)
        except Exception as e:  # noqa: BLE001 — any transport failure is reported with the URL
            raise EndpointError(url, f"{type(e).__name__}: {e}")
        return r.status_code, r.text

    async def post_json(self, path: str, body: dict[str, Any], timeout: float = 60.0) -> tuple[int, Any]:
        url = self.root + path
        try:
            r = await self._http.post(url, json=body, timeout=timeout)
        except Exception as e:  # noqa: BLE001
            raise EndpointError(url, f"{type(e).__name__}: {e}")
        try:
            data = r.json()
        except ValueError:
            data = r.text
        return r.status_code, data

    async def rtt_ns(self, path: str = "/v1/models", samples: int = 5) -> int:
        """Median round trip of a cheap GET (docs/measurement.md, "Round-trip time"). Never call inside a measurement window."""
        times = []
        for _ in range(samples):
            t0 = time.perf_counter_ns()
            await self.get(path)
            times.append(time.perf_counter_ns() - t0)
        times.sort()
        return times[len(times) // 2]

    async def models(self) -> list[str]:
        status, text = await self.get("/v1/models")
        if status != 200:
            raise EndpointError(self.base + "/models", f"HTTP {status}: {text[:200]}")
        try:
            return [m["id"] for m in json.loads(text).get("data", [])]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise EndpointError(self.base + "/models", f"not an OpenAI model list: {text[:200]}")

    # ------------------------------------------------------------------ streaming
    async def stream(self, req: StreamRequest) -> StreamResult:
        """Run one streamed request; failures (HTTP, transport, timeout) come back in `error`, never raised."""
        raw = await self.stream_raw(req)
        # Parse only when no stream is open any more: parsing one finished stream of a concurrent group must not
        # stall the event loop while the others' last chunks arrive.
        await self._idle.wait()
        return raw.parsed()

    async def stream_raw(self, req: StreamRequest, parser: SSEParser | None = None) -> RawStream:
        """Run one streamed request and return it stamped but unparsed (`RawStream.parsed()` parses it), for
        senders whose streams never all end at once (a load level). Failures come back in `error`. A caller
        that hands its own `parser` can count the stream's reads while it runs (`SSEParser.reads`)."""
        import openai  # already loaded by __init__; binds the name for the except clause

        if parser is None:
            parser = SSEParser(StreamResult())
        res = parser.res
        self._gc_hold(+1)
        watch: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(req.timeout) as scope:
                if req.stall_s is not None:
                    watch = asyncio.create_task(_cut_when_silent(scope, parser, req.stall_s))
                await self._stream(req, res, parser)
        except TimeoutError:
            cut = res.cut_after_s
            res.error = (
                f"{CUT} no chunk for {cut:.1f} s (stall bound {req.stall_s:g} s)"
                if cut is not None
                else f"{TIMED_OUT} {req.timeout:g} s"
            )
        except openai.APIStatusError as e:
            res.http_status = e.status_code
            res.error = f"HTTP {e.status_code}: {str(e.message)[:300]}"
        except _HTTPError as e:
            res.error = str(e)
        except Exception as e:  # noqa: BLE001 — a broken stream is a failed sample, not a crash
            res.error = f"{type(e).__name__}: {e}"[:400]
        finally:
            if watch is not None:
                watch.cancel()
            self._gc_hold(-1)
        if res.t_end is None:
            res.t_end = time.perf_counter_ns()
        return RawStream(res, parser)

    def _gc_hold(self, step: int) -> None:
        """No cyclic-GC pauses while any stream is open (a collection stalls the loop and delays stamps);
        the collector's previous state is restored when the last stream ends."""
        if step > 0 and self._streams == 0:
            self._gc_was_enabled = gc.isenabled()
            gc.disable()
            self._idle.clear()
        self._streams += step
        if step < 0 and self._streams == 0:
            self._idle.set()
            if self._gc_was_enabled:
                gc.enable()

    def _json(self, req: StreamRequest) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) of the direct transport: the same fields the SDK would send."""
        body: dict[str, Any] = {
            "model": req.model,
            "max_tokens": req.max_tokens,
            "stream": True,
            "temperature": req.temperature,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if req.seed is not None:
            body["seed"] = req.seed
        if req.min_tokens is not None:
            body["min_tokens"] = req.min_tokens
        if req.ignore_eos:
            body["ignore_eos"] = True
        body.update(req.extra)
        if req.api == "chat":
            body["messages"] = req.chat()
            return "/chat/completions", body
        if req.api == "completions":
            body["prompt"] = req.prompt
            return "/completions", body
        raise ValueError(f"api must be 'chat' or 'completions', got {req.api!r}")

    def _body(self, req: StreamRequest) -> tuple[Any, dict[str, Any]]:
        extra: dict[str, Any] = {}
        if req.min_tokens is not None:
            extra["min_tokens"] = req.min_tokens
        if req.ignore_eos:
            extra["ignore_eos"] = True
        extra.update(req.extra)
        kwargs: dict[str, Any] = dict(
            model=req.model,
            max_tokens=req.max_tokens,
            stream=True,
            temperature=req.temperature,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
            extra_body=extra,
            timeout=_stream_timeout(req.timeout),
        )
        if req.seed is not None:
            kwargs["seed"] = req.seed
        if req.api == "chat":
            kwargs["messages"] = req.chat()
            return self._sdk.chat.completions.with_streaming_response, kwargs
        if req.api == "completions":
            kwargs["prompt"] = req.prompt
            return self._sdk.completions.with_streaming_response, kwargs
        raise ValueError(f"api must be 'chat' or 'completions', got {req.api!r}")

    async def _stream(self, req: StreamRequest, res: StreamResult, parser: SSEParser) -> None:
        res.t_send = time.perf_counter_ns()  # replaced by the request hook's stamp below
        if self.transport == "sdk":
            api, kwargs = self._body(req)
            async with api.create(**kwargs) as resp:
                await self._read(resp.http_response, res, parser)
            return
        path, body = self._json(req)
        headers = {"Authorization": f"Bearer {self._key}", "Accept": "text/event-stream"}
        async with self._http.stream(
            "POST", self.base + path, json=body, headers=headers, timeout=_stream_timeout(req.timeout)
        ) as resp:
            if resp.status_code >= 400:
                text = (await resp.aread()).decode(errors="replace")
                res.http_status = resp.status_code
                res.t_send = resp.request.extensions.get("labkit_t_send", res.t_send)
                raise _HTTPError(resp.status_code, text)
            await self._read(resp, res, parser)

    @staticmethod
    async def _read(resp: Any, res: StreamResult, parser: SSEParser) -> None:
        ext = resp.request.extensions
        res.t_send = ext.get("labkit_t_send", res.t_send)
        res.t_hdr = ext.get("labkit_t_hdr")
        res.http_status = resp.status_code
        # The hot loop only stamps and keeps the bytes; SSE/JSON parsing happens after the stream ends, so a
        # slow parse can never make the client fall behind the stream and stamp late.
        reads = parser.reads
        async for data in resp.aiter_raw():
            reads.append((time.perf_counter_ns(), data))
            if b"data: [DONE]" in data:
                break


class _HTTPError(Exception):
    def __init__(self, status: int, text: str):
        self.status, self.text = status, text
        try:
            err = json.loads(text).get("error", text)
            text = err.get("message", str(err)) if isinstance(err, dict) else str(err)
        except (ValueError, AttributeError):
            pass
        super().__init__(f"HTTP {status}: {text[:300]}")


async def _cut_when_silent(scope: asyncio.Timeout, parser: SSEParser, stall_s: float) -> None:
    """Ends the request's timeout scope once no read arrived for `stall_s` (counted from the send before the
    first read), noting the silence on the result. One check per quarter of the bound, not a timer re-armed
    on every read: a stall is seconds long, and the hot loop stays a stamp and an append."""
    loop = asyncio.get_running_loop()
    res = parser.res
    while True:
        await asyncio.sleep(max(0.01, stall_s / 4))
        reads = parser.reads
        last = reads[-1][0] if reads else res.t_send
        silent = (time.perf_counter_ns() - last) / 1e9 if last else 0.0
        if silent >= stall_s:
            res.cut_after_s = silent
            scope.reschedule(loop.time())
            return


def _stream_timeout(total: float) -> openai.Timeout:
    """No per-read timeout on streams: the whole request is bounded by asyncio.timeout(total) in `stream`, and a
    per-read timer would be re-armed on every chunk (measurable CPU at thousands of chunks/s)."""
    import openai

    return openai.Timeout(total, read=None)


async def _stamp_request(request: Any) -> None:
    request.extensions["labkit_t_send"] = time.perf_counter_ns()


async def _stamp_response(response: Any) -> None:
    response.request.extensions["labkit_t_hdr"] = time.perf_counter_ns()
