"""What a Bench's run hands back: its records, groups and scrapes with the summary and provenance as one
BenchResult, the I/O probes' deltas over the run, the nodes' telemetry samples, and the partial result kept
when a run stops halfway.

The functions take the run's context and its log (labkit/measure/session.py); a failing probe or
partial-result hook costs its figure or a message on stderr, never the run's own outcome.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from labkit.measure.prompt.corpus import load_corpus
from labkit.measure.provenance import provenance
from labkit.measure.records import BenchResult
from labkit.measure.session import RunContext, RunLog
from labkit.measure.summary.compose import summarize
from labkit.measure.telemetry import io_probe as iop


def io_deltas(
    ctx: RunContext, log: RunLog, before: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Per probe, counters after - before; a probe that fails now costs its figure (noted), not the run."""
    out = {}
    for p in ctx.io_hooks:
        try:
            out[p.name] = iop.delta(before[p.name], p.sample())
        except Exception as e:
            log.notes.append(f"I/O probe {p.name} failed after the run: {e}"[:300])
    return out


def bench_result(ctx: RunContext, log: RunLog, io: dict[str, dict[str, float]]) -> BenchResult:
    """Everything measured so far, summarized and with its provenance (marked not partial)."""
    summary = summarize(
        log.records,
        log.groups,
        ctx.plan,
        acceptance=log.acceptance,
        pc_window=log.pc_window,
        notes=log.notes,
        rtt_ns=log.rtt_ns,
        counter_kind=log.counter_kind,
        io=io,
        windows=log.evidence.windows,
        telemetry=None if ctx.telemetry is None else ctx.telemetry.result(ctx.t_origin),
        loops_expected=ctx.loops_expected,
        engine_metrics_asked=ctx.engine_metrics_asked,
        content_acceptance=log.content_acceptance,
        request_accepted=log.request_accepted if log.acceptance is not None else None,
        level_gauges=log.level_gauges,
        failed_levels=log.failed_levels,
    )
    prov = provenance(
        ctx.client,
        ctx.plan,
        log.records,
        version=log.version,
        engine_info=log.engine_info,
        model=ctx.model,
        models=log.models,
        lane=ctx.lane,
        recipe_hash=ctx.recipe_hash,
        variant=ctx.variant,
        run_id=ctx.run_id,
        api=ctx.api,
        counter_kind=log.counter_kind,
        t_origin=ctx.t_origin,
        rtt_ns=log.rtt_ns,
        cold_expected=ctx.cold_expected,
        io_hooks=ctx.io_hooks,
    )
    prov["partial"] = False
    kv = log.kv_pool
    if kv:
        prov["kv_pool"] = kv
        if kv.get("tokens") is not None and summary.measures.get("kv_pool_tokens") is None:
            summary.measures["kv_pool_tokens"] = kv["tokens"]
            summary.method["kv_pool_tokens"] = (
                f"engine API ({kv.get('chosen')}); docs/engines.md, KV pool sources"
            )
    prov["prompt_seed"] = ctx.prompt_seed
    prov["drain_timeout_s"] = ctx.drain_timeout
    prov["loops_expected"] = ctx.loops_expected
    prov["engine_metrics_asked"] = ctx.engine_metrics_asked
    prov["prompt_texts"] = (
        "seeded by prompt_seed, repetition and place in the plan; a fresh nonce first"
        if ctx.prompt_seed is not None
        else "seeded by each prompt's own fresh nonce"
    )
    if ctx.plan.content:  # which corpus the content turns drew from (docs/measurement.md, "Prompt content")
        prov["prompt_corpus"] = dict(load_corpus().facts(), categories=list(ctx.plan.content))
    samples = {} if ctx.telemetry is None else ctx.telemetry.csv(ctx.t_origin)
    return BenchResult(log.records, log.groups, summary, prov, log.scrapes, io, samples)


def keep_partial(
    ctx: RunContext,
    log: RunLog,
    e: BaseException,
    save_to: str | Path | None,
    on_partial: Callable[[BenchResult], None] | None,
) -> None:
    """The result so far, marked partial with the error, saved to `save_to` and handed to `on_partial`."""
    result = bench_result(ctx, log, {})
    result.provenance.update(partial=True, error=f"{type(e).__name__}: {e}"[:300])
    if save_to is not None:
        result.save(save_to)
        print(f"labkit bench: partial results ({len(log.records)} requests) in {save_to}", file=sys.stderr)
    if on_partial is not None:
        try:
            on_partial(result)
        except Exception as err:  # the original failure is what the caller must see
            print(f"labkit bench: could not keep the partial result: {err}", file=sys.stderr)
