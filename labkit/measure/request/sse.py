"""The stream's raw timeline and the SSE parser that fills it, after the stream ended (stamps already taken).

Token counting follows docs/measurement.md, "Token counting and its precedence": per-chunk `token_ids` (vLLM `return_token_ids`) > cumulative
`continuous_usage_stats` > final `usage.completion_tokens` (total only) > counting non-empty chunks (only
when the engine sends no usage at all; recorded as such). The requested length is never assumed. Requests
ask for `continuous_usage_stats` (with `include_usage`, as vLLM requires), not `return_token_ids`: SGLang rejects
the latter on streamed chat, and cumulative usage gives the same per-chunk counts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamResult:
    """The raw timeline of one stream, before any formula is applied."""

    t_send: int = 0
    t_hdr: int | None = None
    t_chunk1: int | None = None
    t_first: int | None = None
    t_content: int | None = None
    t_last: int | None = None
    t_end: int | None = None
    chunk_t: list[int] = field(default_factory=list)  # token-bearing chunks only
    chunk_n: list[int] | None = None  # tokens per chunk, None when the engine does not say
    sse_events: int = 0  # every data: event, token-bearing or not
    output_tokens: int | None = None
    output_tokens_source: str = ""
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    http_status: int | None = None
    response_id: str = ""  # the server's id of the completion (first event's "id")
    # the engine's own per-request figures (vLLM's `metrics` object, on the final usage chunk when the server
    # runs with --enable-per-request-metrics / --per-request-spec-decode-metrics; docs/engines.md)
    engine_metrics: dict[str, Any] | None = None
    text: str = (
        ""  # the generated text (answer and reasoning), joined after the stream, for the sanity checks
    )
    error: str = ""
    warnings: list[str] = field(default_factory=list)
    # seconds without a read when the client cut the stream (StreamRequest.stall_s), None when it was not cut
    cut_after_s: float | None = None

    @property
    def ok(self) -> bool:
        return not self.error


@dataclass
class RawStream:
    """A finished stream whose reads are stamped but not parsed yet (StreamClient.stream_raw): a load level's
    streams overlap without end, so waiting for no stream to be open before parsing (as `stream` does) would
    never happen; the level parses its streams once it has drained."""

    res: StreamResult
    parser: SSEParser

    def parsed(self) -> StreamResult:
        """The stream parsed (once: a second call returns the same result)."""
        if not self.parser.done_parsing:
            self.parser.finish()
        return self.res


class SSEParser:
    """Splits raw SSE bytes into events and folds each into the StreamResult (stamps already taken)."""

    def __init__(self, res: StreamResult):
        self.res = res
        self.buf = b""
        self.cum: int | None = None  # last cumulative completion_tokens seen on a chunk with choices
        self.has_ids = False
        self.pending: list[tuple[int, int | None, int | None]] = []  # (t, ids count, usage delta) per chunk
        self.parts: list[str] = []  # generated text, per token-bearing event
        self.done = False
        self.done_parsing = False  # finish() ran
        self.reads: list[
            tuple[int, bytes]
        ] = []  # (stamp, raw bytes) of every network read, parsed in finish()

    def feed(self, data: bytes, now: int) -> bool:
        """Consume one network read stamped `now`; True once `[DONE]` arrived."""
        buf = self.buf + data
        *lines, self.buf = buf.split(b"\n")
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.res.t_end = now
                self.done = True
                return True
            if payload:
                self._event(json.loads(payload), now)
        return False

    def _event(self, ev: dict[str, Any], now: int) -> None:
        res = self.res
        res.sse_events += 1
        if not res.response_id and isinstance(ev.get("id"), str):
            res.response_id = ev["id"]
        usage = ev.get("usage")
        if usage:
            res.usage = usage
        metrics = ev.get("metrics")
        if isinstance(metrics, dict):
            res.engine_metrics = metrics
        choices = ev.get("choices") or []
        if "error" in ev and not choices:
            err = ev["error"]
            res.error = "stream error: " + (
                err.get("message", str(err)) if isinstance(err, dict) else str(err)
            )
            return
        if not choices:
            return
        if res.t_chunk1 is None:
            res.t_chunk1 = now
        ch = choices[0]
        delta = ch.get("delta")
        if delta is not None:  # chat
            content = delta.get("content") or ""
            reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
            ids = delta.get("token_ids", ch.get("token_ids"))
        else:  # completions
            content = ch.get("text") or ""
            reasoning = ""
            ids = ch.get("token_ids")
        if ch.get("finish_reason"):
            res.finish_reason = ch["finish_reason"]
        n_ids = None
        if ids is not None:
            self.has_ids = True
            n_ids = len(ids)
        n_usage = None
        if usage and usage.get("completion_tokens") is not None:
            cum = int(usage["completion_tokens"])
            n_usage = cum - (self.cum or 0)
            self.cum = cum
        known = n_ids if n_ids is not None else n_usage
        bearing = known > 0 if known is not None else bool(content or reasoning)
        if not bearing:
            return
        if res.t_first is None:
            res.t_first = now
        if content and res.t_content is None:
            res.t_content = now
        res.t_last = now
        res.chunk_t.append(now)
        self.pending.append((now, n_ids, n_usage))
        self.parts.append(reasoning + content)

    def finish(self) -> None:
        """Parse the stamped reads, then decide N, its source and per-chunk counts (docs/measurement.md, "Token counting and its precedence")."""
        res = self.res
        self.done_parsing = True
        for stamp, data in self.reads:
            try:
                if self.feed(data, stamp):
                    break
            except ValueError as e:  # malformed JSON in an event
                res.error = res.error or f"malformed SSE event: {e}"[:300]
                break
        self.reads = []
        res.text = "".join(self.parts)
        usage = res.usage or {}
        if usage.get("prompt_tokens") is not None:
            res.prompt_tokens = int(usage["prompt_tokens"])
        details = usage.get("prompt_tokens_details") or {}
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            res.cached_tokens = int(details["cached_tokens"])
        final = usage.get("completion_tokens")
        final = int(final) if final is not None else None
        pend = self.pending
        ids = [p[1] for p in pend if p[1] is not None]
        deltas = [p[2] for p in pend if p[2] is not None]
        if pend and len(ids) == len(pend):  # every chunk said its ids count
            res.chunk_n, res.output_tokens_source = ids, "token_ids"
        elif pend and len(deltas) == len(pend):
            res.chunk_n, res.output_tokens_source = deltas, "continuous_usage"
        elif final is not None:
            res.chunk_n, res.output_tokens_source = None, "final_usage"
        elif pend:
            # No usage anywhere: only valid for engines that never send it, one token per chunk (llama.cpp).
            res.chunk_n, res.output_tokens_source = [1] * len(pend), "chunk_count"
        counted = sum(res.chunk_n) if res.chunk_n is not None else None
        res.output_tokens = final if final is not None else counted
        if final is not None and counted is not None and counted != final:
            res.warnings.append(f"per-chunk counts sum to {counted}, final usage says {final}")
        if not res.error and res.finish_reason is None:
            if res.http_status == 200 and res.sse_events == 0:
                # llama-cpp-python answers a streamed prompt longer than n_ctx this way (no error event).
                res.error = (
                    "empty stream: HTTP 200 with no SSE events and no [DONE] (prompt over the context?)"
                )
            else:
                res.error = "stream ended without a finish_reason (truncated?)"
