"""The depth workload of a Bench's plan: per context depth D, requests whose D tokens of context are uncached (a
fresh context, computed in full) and cached (a load request sent the same context just before), each asking a
short question and forcing the answer's length (labkit/measure/prompt/context.py; docs/measurement.md, "Context
depth").

Why its own window per depth (`depth_<D>`): the cached requests hit the prefix cache by design, so they must
neither enter the fresh-prompt figures nor raise their cache-hit flag; the scrape after each request gives its
prefix-cache counter delta, checked against what the load request put in the cache. Every scrape pair goes to
the run's evidence like the other windows, with the drain wait at its start and after each request. The
contexts are fitted to D server tokens (to the token where the server counts them), which takes a few counts
per context: a progress line per depth says how long it took.
"""

from __future__ import annotations

import time
from typing import Literal

from labkit.measure.prompt import prompts as pr
from labkit.measure.prompt.context import depth_window, measured_chat, measured_text, question
from labkit.measure.prompt.conversation import block_size, expected_hits
from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.server import metrics as mx
from labkit.measure.session import Session
from labkit.measure.summary.depth import depth_measures
from labkit.measure.workloads.agentic import engine_hits, new_token_prefill
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.prefill import fit_counter
from labkit.measure.workloads.windows import TurnWindows
from labkit.measures import CacheState
from labkit.recipe import DepthPlan, MeasurePlan


async def measure_depth(s: Session, run: int) -> None:
    """Per depth of the plan, in plan order: its window, then `repeats` times each cache state's request."""
    plan, say = s.ctx.plan.depth, s.say
    assert plan is not None  # the runner calls this only for a plan with depths
    await fit_counter(s)
    budget = await question_budget(
        s, plan.prompt_tokens
    )  # outside the windows: the counter may send requests
    for depth in plan.tokens:
        t0 = time.monotonic()
        windows = await TurnWindows.opened(s, run, depth_window(depth))
        block = block_size(windows.first)
        for i in range(plan.repeats):
            for state in plan.states(depth):
                await _measure(s, windows, plan, depth, state, i, block, budget)
        if say is not None:
            say(f"depth {depth:,}: {', '.join(plan.states(depth))} done in {time.monotonic() - t0:.1f} s")


async def question_budget(s: Session, tokens: int) -> int:
    """How many words and punctuation marks make a question of about `tokens` server tokens: one sample counted
    with the run's prompt-length counter, less a one-word prompt's count, so the template cancels."""
    log = s.log
    assert log.counter is not None  # set by fit_counter
    sample = question("0" * 12, "calibration", tokens)
    counted = await log.counter(sample) - await log.counter("x")
    return max(8, round(tokens * pr.pieces(sample) / max(counted, 1)))


async def _measure(
    s: Session,
    windows: TurnWindows,
    plan: DepthPlan,
    depth: int,
    state: CacheState,
    i: int,
    block: int | None,
    budget: int,
) -> None:
    """One measured request at `depth` in `state` (after its load request when cached), each in a window of
    its own; its hits checked against what the load put in the cache."""
    ctx, log = s.ctx, s.log
    assert log.counter is not None
    context = ""
    if depth:
        exact = log.counter_kind.startswith("server ")
        seed = s.text_seed(f"depth.{depth}.{state}.{i}")
        context, _, _ = await pr.fit_prompt(depth, log.counter, exact=exact, seed=seed)
    load: RequestRecord | None = None
    if state == "cached":
        res = await ctx.client.stream(ctx.stream_request(context, 1, forced=True))
        load = _tag(s.record(res, phase="depth", requested=1, turn=i), depth, "load")
        load.server_window = await windows.close([load], f"the context load at depth {depth}")
    ask = question(pr.nonce(), s.text_seed(f"depth.{depth}.{state}.{i}.q") or pr.nonce(), budget)
    req = ctx.stream_request(measured_text(context, ask) if context else ask, plan.output_tokens, forced=True)
    if context and ctx.api == "chat":
        req.messages = measured_chat(context, ask)
    opened = windows.last
    res = await ctx.client.stream(req)
    rec = _tag(s.record(res, phase="depth", requested=plan.output_tokens, turn=i), depth, state)
    rec.server_window = await windows.close([rec], f"the {state} request at depth {depth}")
    pc = mx.prefix_cache(opened, windows.last) if opened is not None and windows.last is not None else None
    rec.hit_window = pc[0] if pc is not None else None
    rec.hit_engine = engine_hits(rec, pc, 1)
    if load is not None and load.ok and load.prompt_tokens is not None:
        # completions: the context's last token may merge with the blank line after it, one token less shared
        shared = load.prompt_tokens - (1 if ctx.api == "completions" else 0)
        hits = expected_hits(shared, 1, rec.prompt_tokens, block)
        if hits is not None:
            rec.hit_expected, rec.hit_expected_max = hits
    new_token_prefill(rec, log.rtt_ns)


def _tag(rec: RequestRecord, depth: int, state: CacheState | Literal["load"]) -> RequestRecord:
    rec.depth, rec.cache_state = depth, state
    return rec


def _summarize(s: RunSummary, inp: SummaryInput) -> None:
    depth_measures(s, inp.records, inp.src)


def _planned(plan: MeasurePlan, cold: bool) -> int:
    return (plan.depth.requests() if plan.depth else 0) * plan.runs


DEPTH = Workload(
    name="depth",
    recipe_key="depth",
    role="added",
    half="decode",
    heading="Context depth",
    table="depths",
    windows=("depth",),
    measures=(
        "depth_<D>_ttft<K>",
        "depth_<D>_prefill<K>",
        "depth_<D>_decode<K>",
        "depth_<D>_ttft_gain",
        "depth_hit_agreement",
    ),
    active=lambda plan: plan.depth is not None,
    planned=_planned,
    run=measure_depth,
    window=lambda rec: depth_window(rec.depth) if rec.depth is not None else None,
    summarize=_summarize,
)
