"""One generation request on a connection: tokens on the engine's absolute schedule, as SSE chunks or one body.

The schedule is absolute (labkit.sim.engine): each step waits for its target time with a select()-based loop
timer (microsecond resolution), or yields once when behind. Each engine step is one SSE event; faults (HTTP
500, exit, stall, held chunks, counter restart) act here, at the request numbers and token counts the config
names.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time

from labkit.sim import openai, tokenizer, truth
from labkit.sim.wire import frame, head

WORD_BYTES = [json.dumps(" " + w)[1:-1].encode() for w in tokenizer.WORDS]
SLOT_POLL_S = 0.001  # how often a request held by max_num_seqs looks for a free slot


async def generate(conn, req: openai.GenRequest, keep: bool) -> None:
    """Answer one generation request on `conn` (a labkit.sim.connection.HttpConn); beyond `max_num_seqs`
    running requests it waits for a free slot first, counted as waiting."""
    cfg, eng = conn.app.cfg, conn.app.engine
    received = time.perf_counter()
    if cfg.max_num_seqs and not cfg.step_mode:  # step mode: the scheduler's waiting queue holds it
        conn.app.held += 1
        try:
            while eng.running >= cfg.max_num_seqs:
                await asyncio.sleep(SLOT_POLL_S)
        finally:
            conn.app.held -= 1
    number = eng.n_requests + 1
    if number == cfg.fault_restart_request:
        eng.restart()
        conn.app.log.line(
            f"simulated fault: engine counters reset before request {number} (a restart)", "WARNING"
        )
    if number == cfg.fault_http500_request:
        eng.n_requests += 1  # the failed request still takes its number
        err = openai.ApiError(500, f"simulated fault: HTTP 500 on request {number}", "InternalServerError")
        conn.reply(500, "application/json", err.body(), keep)
        return
    await Generation(conn, req, keep, received).run()


class Generation:
    """An admitted request: its engine record, how it is rendered, and which faults apply to it."""

    def __init__(self, conn, req: openai.GenRequest, keep: bool, received: float | None = None):
        app = conn.app
        self.conn, self.app, self.cfg, self.eng, self.req, self.keep = (
            conn,
            app,
            app.cfg,
            app.engine,
            req,
            keep,
        )
        cfg = self.cfg
        self.req_id = app.new_id(req.endpoint)
        rec = self.rec = self.eng.admit(
            req.ids,
            req.max_tokens,
            req.min_tokens,
            req.ignore_eos,
            req.endpoint,
            req.stream,
            self.req_id,
            content=req.content,
            scheduled=not cfg.step_mode,
        )
        self.exit_at = cfg.fault_exit_after_tokens if rec.index == cfg.fault_exit_request else -1
        self.stall_at = cfg.fault_stall_after_tokens if rec.index == cfg.fault_stall_request else -1
        self.hold = rec.index == cfg.fault_hold_request
        self.held: list[bytes] = []
        self.render = (
            openai.StreamRenderer(
                cfg,
                req.endpoint,
                self.req_id,
                app.created,
                rec.prompt_tokens,
                rec.cached_tokens,
                req.continuous_usage,
            )
            if req.stream
            else None
        )
        self.received = rec.t_arrival if received is None else received
        self.words = _words(rec.index, cfg.seed, rec.target_tokens, rec.index == cfg.fault_loop_request)
        self.histogram = [0] * (cfg.spec_k + 1 if cfg.spec_on else 0)  # verify steps by drafts accepted
        self.step_accepted: list[int] = []  # accepted drafts of every step, in order
        self.step_drafted: list[
            int
        ] = []  # drafts every step verified (K, fewer when a step's budget ran out)
        self.text_parts: list[bytes] = []
        self.eos_at = rec.eos_at

    async def run(self) -> None:
        if self.render is not None:
            self.conn.transport.write(head(200, "text/event-stream; charset=utf-8", None, self.keep))
        try:
            if not await (self._from_steps() if self.app.steps is not None else self._steps()):
                return
        except asyncio.CancelledError:
            self._leave()
            self.eng.finish(self.rec, "aborted", "abort")
            raise
        self._finish()

    async def _steps(self) -> bool:
        """Every step on time; False when the request ended early (client gone, stall fault)."""
        conn, eng, rec, cfg = self.conn, self.eng, self.rec, self.cfg
        loop = asyncio.get_running_loop()
        clock = time.perf_counter
        target = rec.t_prefill_end
        first = True
        while True:
            # wait for the absolute target time (select() timeout has microsecond resolution)
            delay = target - clock()
            if delay > 0:
                fut = loop.create_future()
                loop.call_at(loop.time() + delay, fut.set_result, None)
                await fut
            else:
                await asyncio.sleep(0)  # behind schedule: emit now, but let other streams run
            if conn.closed:
                eng.finish(rec, "aborted", "abort")
                return False
            now = clock()
            before, accepted = rec.completion_tokens, rec.accepted
            n = eng.first_token(rec, now, target) if first else eng.step(rec, now, target)
            if self.histogram and not first:
                self.histogram[rec.accepted - accepted] += 1
                self.step_accepted.append(rec.accepted - accepted)
                self.step_drafted.append(cfg.spec_k)
            done = rec.completion_tokens >= rec.target_tokens
            await self._emit(self._text(before, n), before, before + n, first, done)
            first = False
            if done:
                return True
            if not await self._faults(before + n):
                return False
            target = eng.next_target(rec, target)

    async def _from_steps(self) -> bool:
        """Step mode: write each emission the engine loop hands over (labkit.sim.steps); False when the request
        ended early (client gone, stall fault, engine loop gone)."""
        steps, rec = self.app.steps, self.rec
        queue = steps.add(rec)
        closed = self.conn.closed_future()

        def gone(_) -> None:
            queue.put_nowait(None)

        closed.add_done_callback(gone)
        chunk = 0
        try:
            while True:
                em = await queue.get()
                if em is None or self.conn.closed:
                    self._leave()
                    self.eng.finish(rec, "aborted", "abort")
                    return False
                after = em.before + em.tokens
                if self.histogram and em.drafted:
                    self.histogram[em.accepted] += 1
                    self.step_accepted.append(em.accepted)
                    self.step_drafted.append(em.drafted)
                text = self._text(em.before, em.tokens)
                rec.written(chunk, em.first, em.target, time.perf_counter())
                chunk += 1
                await self._emit(text, em.before, after, em.first, em.done)
                if em.done:
                    return True
                if not await self._faults(after):
                    return False
        finally:
            closed.remove_done_callback(gone)  # a keep-alive connection outlives its requests

    def _leave(self) -> None:
        """Out of the step scheduler (its blocks freed) when the request ends early; nothing without it."""
        if self.app.steps is not None:
            self.app.steps.drop(self.rec)

    def _text(self, before: int, n: int) -> bytes:
        """The words of this step's tokens; a step reaching the seeded EOS stops before it (EOS has no text)."""
        words, eos_at = self.words, self.eos_at
        if eos_at is not None and before < eos_at <= before + n:
            return b"".join(words[before : eos_at - 1])
        return b"".join(words[before : before + n]) if n > 1 else words[before]

    def _reason(self) -> str:
        return "stop" if self.eos_at is not None and self.rec.completion_tokens >= self.eos_at else "length"

    async def _emit(self, chunk: bytes, before: int, after: int, first: bool, done: bool) -> None:
        """One step's SSE event (held back under the hold fault), or its text kept for the JSON body; `after`:
        the request's tokens with this step's (the engine may be ahead of the writes in step mode)."""
        render, cfg, conn = self.render, self.cfg, self.conn
        if render is None:
            self.text_parts.append(chunk)
            return
        if done:
            out = render.last(chunk, after, self._reason())
        else:
            out = render.tokens(chunk, after)
        if first and self.req.endpoint == "chat":
            conn.transport.write(frame(render.role()))
        if self.hold and before >= cfg.fault_hold_from:
            self.held.append(frame(out))
            if done or 0 < cfg.fault_hold_until <= after:
                self.hold = False
                await conn.write(b"".join(self.held))
        else:
            await conn.write(frame(out))

    async def _faults(self, after: int) -> bool:
        """The exit and stall faults after a chunk that brought the request to `after` tokens: exit ends the
        process, a stall returns False once closed."""
        rec = self.rec
        if self.exit_at >= 0 and after >= self.exit_at:
            self.app.log.line(
                f"EngineCore encountered a fatal error (simulated fault: exit after "
                f"{after} tokens of request {rec.index})",
                "ERROR",
                "core.py:1120",
            )
            self.eng.finish(rec, "exited", "abort")
            os._exit(3)
        if self.stall_at >= 0 and after >= self.stall_at:
            self._leave()
            self.eng.finish(rec, "stalled", None)
            await self.conn.wait_closed()
            return False
        return True

    def _finish(self) -> None:
        """Close the request: the stream's usage chunk (with the per-request metrics vLLM puts there) and
        [DONE], or the whole JSON answer."""
        rec, conn, render, req = self.rec, self.conn, self.render, self.req
        reason = self._reason()
        self.eng.finish(rec, "finished", reason)
        metrics = truth.request_metrics(
            self.cfg, rec, self.received, self.histogram, self.step_accepted, self.step_drafted
        )
        if render is not None:
            tail = b""
            if req.include_usage:
                tail += frame(render.usage_chunk(rec.completion_tokens, metrics))
            tail += frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
            conn.transport.write(tail)
            if not self.keep:
                conn.transport.close()
                conn.closed = True
        else:
            text = b"".join(self.text_parts).decode()
            conn.reply(
                200,
                "application/json",
                openai.full_response(
                    self.cfg,
                    req.endpoint,
                    self.req_id,
                    self.app.created,
                    text,
                    reason,
                    rec.prompt_tokens,
                    rec.completion_tokens,
                    rec.cached_tokens,
                    metrics,
                ),
                self.keep,
            )


def _words(index: int, seed: int, tokens: int, loop: bool) -> list[bytes]:
    """The text of request `index`, one word per token: drawn from its own seeded stream, so it never repeats
    itself exactly (a cycle through the word list would read as a loop); the loop fault repeats one word."""
    if loop:
        return [WORD_BYTES[index % len(WORD_BYTES)]] * tokens
    return random.Random(f"words/{seed}/{index}").choices(WORD_BYTES, k=max(tokens, 1))
