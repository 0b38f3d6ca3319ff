"""The content workload of a Bench's plan: after the decode phase, c1 turns on the pinned corpus prompts of each
category the plan names (`measure.content`), each category between scrapes of its own so its acceptance is
its own turns' counter deltas (docs/measurement.md, "Prompt content").

Why after the decode phase and in windows of its own: the decode window and its acceptance stay exactly what
they were without content, and a category's figures are not mixed with another's. Why no warmup and no cold
turn: the decode phase before it has warmed the engine. Every scrape pair goes to the run's evidence as the
window `decode@<category>`; a counter that went backwards in it leaves that category without acceptance.
"""

from __future__ import annotations

from labkit.measure.prompt import prompts as pr
from labkit.measure.prompt.corpus import content_prompt, load_corpus
from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.server import metrics as mx
from labkit.measure.server.scrapes import flush_for_acceptance, pool_acceptance
from labkit.measure.session import Session
from labkit.measure.summary.content import content_measures
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.windows import TurnWindows, window_result
from labkit.measures import CONTENT_MARK


def content_window(category: str) -> str:
    """The evidence window of a category's turns: decode@code."""
    return f"decode{CONTENT_MARK}{category}"  # a window, no catalogue key: no content_key


async def measure_content(s: Session, run: int) -> dict[str, mx.Acceptance]:
    """Per category of the plan, in plan order: `decode.turns` c1 turns of the decode shape, one corpus prompt
    each; the acceptance of each category's window (a category without counters, or with a reset, has none)."""
    out = {}
    for category in s.ctx.plan.content:
        acc = await _category(s, run, category)
        if acc is not None:
            out[category] = acc
    return out


async def _category(s: Session, run: int, category: str) -> mx.Acceptance | None:
    ctx, log = s.ctx, s.log
    d, window = ctx.plan.decode, content_window(category)
    N = d.output_tokens
    # which prompts, in which order: the run's prompt seed for this place, else a fresh nonce (never repeated)
    seed = s.text_seed(f"content.{category}") or pr.nonce()
    drawn = load_corpus().draw(category, seed, d.turns)
    windows = await TurnWindows.opened(s, run, window)
    flushed = await flush_for_acceptance(ctx.client, windows.first, log.notes)
    n_before = len(log.records)
    for turn, prompt in enumerate(drawn, 1):
        n = pr.nonce()
        text = content_prompt(n, prompt)
        res = await ctx.client.stream(ctx.stream_request(text, N, forced=True))
        rec = s.record(
            res, phase="content", content=category, content_id=prompt.id, requested=N, turn=turn, nonce=n
        )
        await windows.close([rec], f"{category} turn {turn}")
    return await window_result(s, window, run, windows.first, windows.last, log.records[n_before:], flushed)


async def _run(s: Session, rep: int) -> None:
    """One repetition's categories; each category's acceptance is pooled over the repetitions."""
    for category, acc in (await measure_content(s, rep)).items():
        pooled = s.log.content_acceptance.get(category)
        s.log.content_acceptance[category] = pool_acceptance(pooled, acc)


def _window(rec: RequestRecord) -> str | None:
    """A category's c1 turns: its own window, decode@<category>, as the evidence has it."""
    return content_window(rec.content) if rec.content else None


def _summarize(s: RunSummary, inp: SummaryInput) -> None:
    content_measures(s, list(inp.ok), inp.plan.content, inp.content_acceptance or {}, inp.src)


CONTENT = Workload(
    name="content",
    recipe_key="content",
    role="content",
    half="decode",
    heading="Prompt content",
    table="content",
    windows=("decode@",),
    measures=("decode_c1@<C>", "ttft_c1@<C>", "accept_length@<C>", "accept_per_draft@<C>"),
    active=lambda plan: plan.decode.turns > 0 and bool(plan.content),
    planned=lambda plan, cold: plan.decode.turns * len(plan.content) * plan.runs,
    run=_run,
    window=_window,
    summarize=_summarize,
)
