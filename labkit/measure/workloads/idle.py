"""The idle workload of a Bench's plan: for each `measure.idle_s` entry S, the engine is left idle for S seconds,
then one request of the decode shape is sent, tagged as an idle turn (`phase = "idle"`, `idle_s = S`) as the
first request after boot is tagged cold, and reported apart (docs/measurement.md, "Idle turns").

Why: a GPU left idle drops its clocks and its caches go cold; the first request after a pause can be far slower
than a warm one, and a lab that only measures back-to-back requests never sees it. Each idle turn has its own
window (`idle_<S>`): the scrape before the pause (after the drain wait) and the one after the request, so
another client's request during the pause shows as foreign traffic. While idling a progress line says how long
is left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from labkit.measure.prompt import prompts as pr
from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.session import Session
from labkit.measure.summary.turns import idle_measures
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.windows import TurnWindows

IDLE_TICK_S = 10.0  # seconds between the progress lines of a pause


def idle_window(seconds: int) -> str:
    """The evidence window of the idle turn after `seconds` of idle engine: idle_60."""
    return f"idle_{seconds}"


async def measure_idle(s: Session, run: int) -> None:
    """Per idle length of the plan, in plan order: the drain wait, the pause, one forced-length request."""
    d, say = s.ctx.plan.decode, s.say
    for i, seconds in enumerate(s.ctx.plan.idle_s, 1):
        window = idle_window(seconds)
        windows = await TurnWindows.opened(s, run, window)
        await pause(seconds, say)
        n = pr.nonce()
        prompt = pr.decode_prompt(n, s.text_seed(f"idle.{seconds}"))
        t0 = time.monotonic()
        res = await s.ctx.client.stream(s.ctx.stream_request(prompt, d.output_tokens, forced=True))
        rec = s.record(res, phase="idle", requested=d.output_tokens, turn=i, nonce=n)
        rec.idle_s = float(seconds)
        rec.server_window = await windows.close([rec], f"the idle turn after {seconds} s")
        if say is not None:
            say(f"idle turn after {seconds} s: done in {time.monotonic() - t0:.1f} s")


async def pause(seconds: float, say: Callable[[str], None] | None) -> None:
    """Sleep `seconds`, with a progress line at the start and every IDLE_TICK_S."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if say is not None:
            say(f"idle: {seconds - left:.0f} of {seconds:g} s before the idle turn ({left:.0f} s left)")
        await asyncio.sleep(min(IDLE_TICK_S, left))


def _window(rec: RequestRecord) -> str | None:
    return f"idle_{rec.idle_s:g}" if rec.idle_s is not None else None


def _summarize(s: RunSummary, inp: SummaryInput) -> None:
    idle_measures(s, inp.records, inp.src)


IDLE = Workload(
    name="idle",
    recipe_key="idle_s",
    role="added",
    half="decode",
    heading="Idle turns",
    table="turns",
    windows=("idle",),
    measures=("idle_<S>_ttft", "idle_<S>_decode", "idle_<S>_slowdown"),
    active=lambda plan: plan.decode.turns > 0 and bool(plan.idle_s),
    planned=lambda plan, cold: len(plan.idle_s) * plan.runs,
    run=measure_idle,
    window=_window,
    summarize=_summarize,
)
