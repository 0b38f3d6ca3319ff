"""Agentic load: the sessions of one level of the load workload, S at once (docs/measurement.md, "Agentic
load").

Each session is one growing chat conversation (labkit/measure/prompt/conversation.py): an opening of the plan's
prompt size with a nonce of its own, then per turn the previous answer and a tool result appended. A session
sends its next turn a think time after its previous turn ended (fixed or drawn, seeded), so S sessions overlap
freely, as agents do, rather than in lockstep. Each turn's intended send time is kept, and its lateness with it.

Why each turn is parsed as soon as it ends (unlike the load workload's other levels, parsed after the level): the
next turn appends the answer's text. Parsing is done on the loop that stamps the other streams' reads, so it
may delay a stamp by the parse's time (not measured here).

Once the level drained, `session_hits` gives every turn the prefix-cache hits it should find (the previous turn's
prompt, in whole blocks) beside the engine's; the level's hit share and the eviction cliff are the summary's
(labkit/measure/summary/load.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labkit.measure.prompt.conversation import Conversation, expected_hits, tool_result
from labkit.measure.records import RequestRecord
from labkit.measure.request.arrivals import think_gap
from labkit.measure.request.client import StreamRequest
from labkit.measure.request.pacing import until
from labkit.measure.request.sse import RawStream
from labkit.measure.session import Session
from labkit.recipe import LoadPlan


@dataclass
class Turn:
    """One turn of one session, stamped and parsed: the session, its turn (from 1), the nonce of its opening,
    the intended send (ns from the run's start) and the stream."""

    session: int
    turn: int
    nonce: str
    intended_ns: int
    raw: RawStream


async def run_sessions(
    s: Session,
    p: LoadPlan,
    level: int,
    opening: Callable[[], tuple[str, str]],
    request: Callable[[str], StreamRequest],
    budget: int,
    out: list[Turn],
) -> None:
    """`level` sessions at once, `p.turns` turns each; a failed turn ends its session (it has no answer to
    append). `opening` gives a session's first message and its nonce, `request` a request for a prompt,
    `budget` the tool results' size in words and punctuation marks (agentic.tool_budget)."""
    start = time.perf_counter_ns()

    async def session(n: int) -> None:
        text, nonce = opening()
        conv = Conversation()
        conv.open(text)
        due = start
        for turn in range(1, p.turns + 1):
            await until(due)
            req = request("")
            req.messages = [dict(m) for m in conv.messages]
            raw = await s.ctx.client.stream_raw(req)
            out.append(Turn(n, turn, nonce, due - s.ctx.t_origin, raw))
            res = raw.parsed()
            if not res.ok:
                return
            seed = s.text_seed(f"load.sessions.{level}.{n}.{turn}") or nonce
            conv.follow(res.text, tool_result(seed, budget, turn))
            gap = think_gap(p.think_s, p.think, s.ctx.plan.seed, level, n, turn + 1)
            due = time.perf_counter_ns() + int(gap * 1e9)

    await asyncio.gather(*(session(n) for n in range(level)))


def session_hits(recs: Sequence[RequestRecord], block: int | None, window_hits: float | None) -> None:
    """Each turn's expected prefix-cache hits from its session's previous turn (least and most, whole blocks:
    conversation.expected_hits), its engine's own (the response's cached_tokens) and the level's window delta,
    in place; `recs` in any order."""
    by_session: dict[int, list[RequestRecord]] = {}
    for rec in recs:
        rec.hit_window = window_hits
        if rec.cached_tokens is not None:
            rec.hit_engine = float(rec.cached_tokens)
        if rec.session is not None:
            by_session.setdefault(rec.session, []).append(rec)
    for turns in by_session.values():
        turns.sort(key=lambda r: r.turn)
        for prev, rec in zip(turns, turns[1:], strict=False):
            if not prev.ok:
                continue
            hits = expected_hits(prev.prompt_tokens, prev.output_tokens, rec.prompt_tokens, block)
            if hits is not None:
                rec.hit_expected, rec.hit_expected_max = hits
