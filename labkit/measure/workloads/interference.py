"""Prefill under decode: per arriving prompt length P, N streams decode; once every one has passed its warm-up
tokens, prompts of P tokens arrive at fixed offsets, each asking for one token (after a context of
`context_tokens` a request put in the prefix cache before the window, when the plan has one). What an agent's new prompt costs
the streams already running, and what they cost it (docs/measurement.md, "Prefill under decode").

Why a workload of its own: the prefill workload sends a prompt to an idle engine and the decode workload runs
no prompt beside its streams, so with chunked prefill a larger token budget can only look better there; here
the arrival's TTFT and the streams' gaps are measured in the same window, so a sweep shows both sides.

Each P has its window (`interference_<P>`), opened and closed by scrapes with nothing in flight. The streams are
sent with parsers of the workload's own, whose reads it counts while they run (a stream's reads never outnumber
its tokens, so "every stream has passed W reads" means W tokens or more); every stream and arrival is parsed
after the window's last one ended, as a load level's are, so no parse delays a stamp.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from labkit.measure.prompt import prompts as pr
from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.request.pacing import SPIN_S, until
from labkit.measure.request.sse import RawStream, SSEParser, StreamResult
from labkit.measure.session import Session
from labkit.measure.summary.interference import interference_measures
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.load import LevelPrompts
from labkit.measure.workloads.prefill import fit_counter
from labkit.measure.workloads.windows import TurnWindows
from labkit.recipe import (
    INTERFERENCE_MEASURES,
    INTERFERENCE_TABLE,
    STREAM_PROMPT_TOKENS,
    InterferencePlan,
    MeasurePlan,
)

POLL_S = 0.005  # how often the streams' reads are counted while waiting for the warm-up


def interference_window(tokens: int) -> str:
    """The window of the arrivals of `tokens` tokens and the streams beside them: interference_4096."""
    return f"interference_{tokens}"


def _plan(s: Session) -> InterferencePlan:
    p = INTERFERENCE_TABLE.of(s.ctx.plan)
    assert p is not None  # the runner runs this workload only for a plan that asks for it
    return p


async def measure_interference(s: Session, run: int) -> None:
    """Per arriving prompt length, in plan order: the prompts fitted (outside the window: the counter may send
    requests), then the window with its streams and arrivals."""
    p = _plan(s)
    await fit_counter(s)
    counter = s.log.counter
    assert counter is not None
    exact = s.log.counter_kind.startswith("server ")
    # the streams' prompt length matters little: about is enough
    text, _, n = await pr.fit_prompt(
        STREAM_PROMPT_TOKENS, counter, tolerance=0.25, seed=s.text_seed("interference.stream")
    )
    streams = LevelPrompts(text, n)
    context = ""
    if p.context_tokens:
        context, _, _ = await pr.fit_prompt(
            p.context_tokens, counter, exact=exact, seed=s.text_seed("interference.context")
        )
        context += "\n\n"
    for tokens in p.prompt_tokens:
        text, got, n = await pr.fit_prompt(
            tokens, counter, exact=exact, seed=s.text_seed(f"interference.{tokens}")
        )
        if context:  # the context in the prefix cache before the window opens, so only the new part prefills
            res = await s.ctx.client.stream(s.ctx.stream_request(context, 1, forced=True))
            s.record(res, phase="interference", requested=1).interference = "load"
        arriving = LevelPrompts(context + text, n, tokens=got, prefix=len(context))
        await _window(s, p, run, tokens, streams, arriving)


async def _window(
    s: Session, p: InterferencePlan, run: int, tokens: int, streams: LevelPrompts, arriving: LevelPrompts
) -> None:
    """One window: the streams sent at once, the arrivals at their offsets once every stream passed its
    warm-up, everything awaited, then parsed and recorded (streams first, then arrivals, in send order)."""
    t0 = time.monotonic()
    window = interference_window(tokens)
    windows = await TurnWindows.opened(s, run, window)
    client = s.ctx.client
    parsers = [SSEParser(StreamResult()) for _ in range(p.streams)]
    running: list[tuple[str, asyncio.Task[RawStream]]] = []
    for parser in parsers:
        prompt, nonce = streams.fresh()
        req = s.ctx.stream_request(prompt, p.stream_tokens, forced=True)
        running.append((nonce, asyncio.create_task(client.stream_raw(req, parser))))
    warm = await _warmed(parsers, [t for _, t in running], p.warm_tokens, s.ctx.plan.timeout)
    if not warm:
        s.log.notes.append(
            f"{window}: a stream ended or the timeout passed before every stream had {p.warm_tokens} tokens; "
            "the prompts arrived then"
        )
    start = time.perf_counter_ns() + int(SPIN_S * 1e9)
    arrivals: list[tuple[str, asyncio.Task[RawStream]]] = []
    for k in range(p.arrivals):
        await until(start + int(k * p.spacing_s * 1e9))
        prompt, nonce = arriving.fresh()
        req = s.ctx.stream_request(prompt, 1, forced=True)
        arrivals.append((nonce, asyncio.create_task(client.stream_raw(req))))
    recs = [
        _record(s, "stream", i, tokens, nonce, await task, p.stream_tokens)
        for i, (nonce, task) in enumerate(running)
    ]
    recs += [
        _record(s, "arrival", k, tokens, nonce, await task, 1) for k, (nonce, task) in enumerate(arrivals)
    ]
    await windows.close(recs, f"the {len(recs)} requests of {window}")
    if s.say is not None:
        failed = sum(1 for r in recs if not r.ok)
        s.say(
            f"{window}: {p.streams} streams, {p.arrivals} arrivals of {tokens:,} tokens, {failed} failed, in "
            f"{time.monotonic() - t0:.1f} s"
        )


async def _warmed(
    parsers: list[SSEParser], tasks: list[asyncio.Task[RawStream]], warm: int, timeout: float
) -> bool:
    """Wait until every stream has read more than `warm` times (its first read may be headers or a role
    prelude); False when one ended first or the request timeout passed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if all(len(p.reads) > warm for p in parsers):
            return True
        if any(t.done() for t in tasks):
            return False
        await asyncio.sleep(POLL_S)
    return False


def _record(
    s: Session,
    role: Literal["stream", "arrival"],
    index: int,
    tokens: int,
    nonce: str,
    raw: RawStream,
    requested: int,
) -> RequestRecord:
    rec = s.record(
        raw.parsed(), phase="interference", requested=requested, turn=index, stream=index, nonce=nonce
    )
    rec.interference = role
    rec.arriving_tokens = tokens
    if role == "arrival":
        rec.prompt_target = tokens
    return rec


def _planned(plan: MeasurePlan, cold: bool) -> int:
    p = INTERFERENCE_TABLE.of(plan)
    return p.requests() * plan.runs if p is not None else 0


def _summarize(s: RunSummary, inp: SummaryInput) -> None:
    interference_measures(s, inp.records)


INTERFERENCE = Workload(
    name="interference",
    recipe_key="interference",
    role="added",
    half="decode",
    heading="Prefill under decode",
    table="interference",
    windows=("interference",),
    measures=tuple(f"interference_<P>_{m}" for m in INTERFERENCE_MEASURES),
    active=lambda plan: INTERFERENCE_TABLE.of(plan) is not None,
    planned=_planned,
    run=measure_interference,
    window=lambda rec: interference_window(rec.arriving_tokens) if rec.arriving_tokens is not None else None,
    summarize=_summarize,
)
