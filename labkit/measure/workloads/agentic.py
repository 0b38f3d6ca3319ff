"""The agentic workload of a Bench's plan: multi-turn sessions after the content phase, each one growing chat
conversation whose turns append the previous answer and a tool result (labkit/measure/prompt/conversation.py;
docs/measurement.md, "Agentic sessions").

Why its own window (`agentic`): its prompts hit the prefix cache by design, so they must neither enter the
fresh-prompt figures nor raise their cache-hit flag; the scrape between two turns (every session of a turn sent
together, lockstep) gives that turn's prefix-cache counter delta, checked against what the previous turns put in
the cache. Every scrape pair goes to the run's evidence like the other windows, with the drain wait at its start
and after each turn. A turn that fails ends its session (it has no answer to append); the note says so.
"""

from __future__ import annotations

import asyncio

from labkit.measure.prompt import prompts as pr
from labkit.measure.prompt.conversation import (
    AGENTIC_WINDOW,
    Conversation,
    block_size,
    expected_hits,
    opening,
    tool_result,
)
from labkit.measure.prompt.tokencount import make_counter
from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.request.timing import NS, prefill_tps
from labkit.measure.server import metrics as mx
from labkit.measure.session import Session
from labkit.measure.summary.turns import turn_measures
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.windows import TurnWindows
from labkit.recipe import MeasurePlan


async def measure_agentic(s: Session, run: int) -> None:
    """`repeats` times: `sessions` sessions at once, `turns` turns each, in the window `agentic`."""
    plan = s.ctx.plan.agentic
    assert plan is not None  # the runner calls this only for a plan with sessions
    budget = await tool_budget(s, plan.tool_tokens)  # outside the window: the counter may send requests
    windows = await TurnWindows.opened(s, run, AGENTIC_WINDOW)
    block = block_size(windows.first)
    if block is None:
        s.log.notes.append(
            "agentic: the engine does not say its prefix-cache block size (vllm:cache_config_info): "
            "expected hit tokens are counted in tokens, not whole blocks"
        )
    for r in range(plan.repeats):
        first = r * plan.sessions
        convs = {first + i: Conversation() for i in range(plan.sessions)}
        for n, conv in convs.items():
            conv.open(opening(pr.nonce(), s.text_seed(f"agentic.{n}") or pr.nonce()))
        for turn in range(1, plan.turns + 1):
            live = {n: c for n, c in convs.items() if not c.broken}
            if not live:
                break
            await _turn(s, live, turn, block, windows, budget)


async def tool_budget(s: Session, tokens: int) -> int:
    """How many words and punctuation marks make a tool result of about `tokens` server tokens: one sample
    result counted with the run's prompt-length counter (the server's /tokenize where it has one; shared with
    the prefill phase), less a one-word prompt's count, so the template cancels. Done before the window opens."""
    log = s.log
    if log.counter is None:
        log.counter, log.counter_kind = await make_counter(s.ctx.client, s.ctx.model or "", s.ctx.api)
    sample = tool_result("calibration", tokens, 1)
    counted = await log.counter(sample) - await log.counter("x")
    budget = max(16, round(tokens * pr.pieces(sample) / max(counted, 1)))
    if s.rep == 0:
        log.notes.append(
            f"agentic: tool results of ~{tokens} tokens are {budget} words and punctuation marks "
            f"({log.counter_kind}: {counted} tokens for {pr.pieces(sample)})"
        )
    return budget


async def _turn(
    s: Session,
    convs: dict[int, Conversation],
    turn: int,
    block: int | None,
    windows: TurnWindows,
    budget: int,
) -> None:
    """One turn of every live session, sent together; its window's hits checked against the expected."""
    ctx, plan = s.ctx, s.ctx.plan.agentic
    assert plan is not None
    reqs = []
    for conv in convs.values():
        req = ctx.stream_request("", plan.answer_tokens, forced=True)
        req.messages = [dict(m) for m in conv.messages]
        reqs.append(req)
    opened = windows.last
    results = await asyncio.gather(*(ctx.client.stream(r) for r in reqs))
    recs = [
        s.record(
            res, phase="agentic", requested=plan.answer_tokens, concurrency=len(convs), turn=turn, stream=i
        )
        for i, res in enumerate(results)
    ]
    view = await windows.close(recs, f"agentic turn {turn}")
    pc = mx.prefix_cache(opened, windows.last) if opened is not None and windows.last is not None else None
    for rec, res, (n, conv) in zip(recs, results, convs.items(), strict=True):
        rec.session, rec.server_window = n, view
        rec.hit_window = pc[0] if pc is not None else None
        rec.hit_engine = engine_hits(rec, pc, len(recs))
        hits = expected_hits(conv.prev_prompt, conv.prev_output, rec.prompt_tokens, block)
        if hits is not None:
            rec.hit_expected, rec.hit_expected_max = hits
        new_token_prefill(rec, s.log.rtt_ns)
        if not rec.ok:
            conv.broken = rec.error or "failed"
            s.log.notes.append(
                f"agentic session {n}: turn {turn} failed ({conv.broken}); the session ends there"
            )
            continue
        conv.turn_done(rec.prompt_tokens, rec.output_tokens)
        seed = s.text_seed(f"agentic.{n}.{turn}") or pr.nonce()
        conv.follow(res.text, tool_result(seed, budget, turn))


def engine_hits(rec: RequestRecord, pc: tuple[float, float] | None, together: int) -> float | None:
    """The engine's hit tokens for this request: its response's cached_tokens, else its window's counter delta
    when it was the window's only request."""
    if rec.cached_tokens is not None:
        return float(rec.cached_tokens)
    if pc is not None and together == 1:
        return pc[0]
    return None


def new_token_prefill(rec: RequestRecord, rtt_ns: int) -> None:
    """Prefill of the new (uncached) tokens, (P - hits) / (TTFT - RTT), with the engine's hits for the request
    (else the least expected); left empty without a prompt count or a first token."""
    if not rec.ok or rec.ttft_s is None or rec.prompt_tokens is None:
        return
    cached = rec.hit_engine if rec.hit_engine is not None else rec.hit_expected
    rec.prefill_tps = prefill_tps(rec.prompt_tokens, int(cached or 0), int(rec.ttft_s * NS), rtt_ns)


def _summarize(s: RunSummary, inp: SummaryInput) -> None:
    turn_measures(s, inp.records, inp.plan, inp.src)


def _planned(plan: MeasurePlan, cold: bool) -> int:
    return (plan.agentic.requests() if plan.agentic else 0) * plan.runs


AGENTIC = Workload(
    name="agentic",
    recipe_key="agentic",
    role="added",
    half="decode",
    heading="Agentic sessions",
    table="turns",
    windows=(AGENTIC_WINDOW,),
    measures=("agentic_ttft_t<T>", "agentic_prefill_t<T>", "agentic_decode_t<T>", "agentic_hit_agreement"),
    active=lambda plan: plan.decode.turns > 0 and plan.agentic is not None,
    planned=_planned,
    run=measure_agentic,
    window=lambda rec: AGENTIC_WINDOW,  # every session's turns: the agentic window
    summarize=_summarize,
)
