"""The prefill workload of a Bench's plan: per target length, prompts fitted to it in server tokens (to the token
when the server counts them), a warmup, then the samples at c1 with max_tokens=1, each between two /metrics
scrapes (its prefix-cache hits and the engine's own view of it).

The functions take the `Session` being run (labkit/measure/session.py): they set its log's prompt-length
counter and RTT, and add to its records, prefix-cache window and evidence log (window `prefill_<P>`;
docs/measurement.md, "Per-run evidence"), sample by sample, so a run stopped halfway keeps what it measured.
"""

from __future__ import annotations

from labkit.measure.prompt import prompts as pr
from labkit.measure.prompt.tokencount import make_counter
from labkit.measure.records import RunSummary
from labkit.measure.server.drain import settled
from labkit.measure.server.scrapes import COUNTER_RESET, prefix_cache_sample, server_view
from labkit.measure.session import Session
from labkit.measure.summary.speed import prefill_measures
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.recipe import MeasurePlan


async def measure_prefill(s: Session, run: int) -> None:
    """Per target length: fitted prompts, a warmup, then the samples, each between two /metrics scrapes."""
    await fit_counter(s)
    s.log.rtt_ns = await s.ctx.client.rtt_ns()
    p = s.ctx.plan.prefill
    for target in p.prompt_tokens:
        warm = min(s.ctx.plan.decode.warmup, 1)
        for i in range(warm + p.repeats):
            await _sample(s, run, target, i, warm)


async def fit_counter(s: Session) -> None:
    """Choose how prompt lengths are counted in server tokens (labkit/measure/prompt/tokencount.py)."""
    if s.log.counter is None:
        s.log.counter, s.log.counter_kind = await make_counter(s.ctx.client, s.ctx.model or "", s.ctx.api)


async def _sample(s: Session, run: int, target: int, i: int, warm: int) -> None:
    """Request `i` at `target` prompt tokens (the first `warm` are warmups, kept out of the cache window)."""
    ctx, log = s.ctx, s.log
    assert log.counter is not None  # set by fit_counter
    exact = log.counter_kind.startswith("server ")  # the server's own count: fit to the token
    seed = s.text_seed(f"prefill.{target}.{i}")
    prompt, counted, n = await pr.fit_prompt(target, log.counter, exact=exact, seed=seed)
    key, window = f"prefill.{target}.{run}.{i}", f"prefill_{target}"
    where = "start" if i == 0 else f"before sample {i + 1}"
    before = await s.scrape(key + ".before")
    before = await settled(s, before, key=key + ".before", window=window, run=run, where=where)
    res = await ctx.client.stream(ctx.stream_request(prompt, 1, forced=True))
    after = await s.scrape(key + ".after")
    learn = getattr(log.counter, "add", None)
    if learn is not None and res.prompt_tokens is not None:
        learn(prompt, res.prompt_tokens)  # a fitted counter improves with every server count
    rec = s.record(
        res,
        phase="warmup" if i < warm else "prefill",
        requested=1,
        turn=i - warm,
        nonce=n,
        prompt_target=target,
        counted=counted,
    )
    reset = log.evidence.pair(window, run, before, after, 1)
    await settled(s, after, key=key + ".after", window=window, run=run, where=f"after sample {i + 1}")
    if reset:
        rec.flags = "; ".join(filter(None, [rec.flags, f"{COUNTER_RESET} ({reset})"]))
        return  # a restart inside the sample: no cache delta, no engine view, and no prefill figure
    server_view([rec], before, after)
    pc = prefix_cache_sample(rec, before, after)
    if pc is not None and i >= warm:
        log.pc_window.append(pc)


def _planned(plan: MeasurePlan, cold: bool) -> int:
    p = plan.prefill
    return len(p.prompt_tokens) * (p.repeats + min(plan.decode.warmup, 1)) * plan.runs


def _summarize(s: RunSummary, inp: SummaryInput) -> None:
    prefill_measures(s, list(inp.ok), inp.plan.prefill.prompt_tokens, inp.rtt_ns, inp.counter_kind)


PREFILL = Workload(
    name="prefill",
    recipe_key="prefill",
    role="plan",
    half="prefill",
    heading="Prefill and TTFT",
    table="measured",
    windows=("prefill",),
    measures=("prefill_<P>", "prefill_<P>_raw", "prefill_<P>_ttft"),
    active=lambda plan: bool(plan.prefill.prompt_tokens),
    planned=_planned,
    run=measure_prefill,
    window=lambda rec: f"prefill_{rec.prompt_target}",
    summarize=_summarize,
)
