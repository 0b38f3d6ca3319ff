"""What a Bench's run hands back: its records, groups and scrapes with the summary and provenance as one
BenchResult, the I/O probes' deltas over the run, the nodes' telemetry samples, and the partial result kept
when a run stops halfway.

The functions take the `Bench` that measured (labkit/measure/runner.py); a failing probe or partial-result
hook costs its figure or a message on stderr, never the run's own outcome.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from labkit.measure import io_probe as iop
from labkit.measure.provenance import provenance
from labkit.measure.records import BenchResult
from labkit.measure.summary import summarize


def io_deltas(bench, before: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Per probe, counters after - before; a probe that fails now costs its figure (noted), not the run."""
    out = {}
    for p in bench.io_hooks:
        try:
            out[p.name] = iop.delta(before[p.name], p.sample())
        except Exception as e:
            bench.notes.append(f"I/O probe {p.name} failed after the run: {e}"[:300])
    return out


def bench_result(
    bench, io: dict, version: str | None, models: list[str], recipe_hash: str | None, variant: str | None
) -> BenchResult:
    """Everything measured so far, summarized and with its provenance (marked not partial)."""
    summary = summarize(
        bench.records,
        bench.groups,
        bench.plan,
        acceptance=bench.acceptance,
        pc_window=bench.pc_window,
        notes=bench.notes,
        rtt_ns=bench.rtt_ns,
        counter_kind=bench.counter_kind,
        io=io,
        windows=bench.evidence.windows,
        telemetry=None if bench.telemetry is None else bench.telemetry.result(bench.t_origin),
    )
    prov = provenance(
        bench.c,
        bench.plan,
        bench.records,
        version=version,
        engine_info=bench.engine_info,
        model=bench.model,
        models=models,
        lane=bench.lane,
        recipe_hash=recipe_hash,
        variant=variant,
        run_id=bench.run_id,
        api=bench.api,
        counter_kind=bench.counter_kind,
        t_origin=bench.t_origin,
        rtt_ns=bench.rtt_ns,
        cold_expected=bench.cold_expected,
        io_hooks=bench.io_hooks,
    )
    prov["partial"] = False
    kv = bench.kv_pool
    if kv:
        prov["kv_pool"] = kv
        if kv.get("tokens") is not None and summary.measures.get("kv_pool_tokens") is None:
            summary.measures["kv_pool_tokens"] = kv["tokens"]
            summary.method["kv_pool_tokens"] = (
                f"engine API ({kv.get('chosen')}); docs/engines.md, KV pool sources"
            )
    prov["prompt_seed"] = bench.prompt_seed
    prov["prompt_texts"] = (
        "seeded by prompt_seed, repetition and place in the plan; a fresh nonce first"
        if bench.prompt_seed is not None
        else "seeded by each prompt's own fresh nonce"
    )
    samples = {} if bench.telemetry is None else bench.telemetry.csv(bench.t_origin)
    return BenchResult(bench.records, bench.groups, summary, prov, bench.scrapes, io, samples)


def keep_partial(
    bench,
    e: BaseException,
    version: str | None,
    models: list[str],
    recipe_hash: str | None,
    variant: str | None,
    save_to: str | Path | None,
    on_partial: Callable[[BenchResult], None] | None,
) -> None:
    """The result so far, marked partial with the error, saved to `save_to` and handed to `on_partial`."""
    result = bench_result(bench, {}, version, models, recipe_hash, variant)
    result.provenance.update(partial=True, error=f"{type(e).__name__}: {e}"[:300])
    if save_to is not None:
        result.save(save_to)
        print(f"labkit bench: partial results ({len(bench.records)} requests) in {save_to}", file=sys.stderr)
    if on_partial is not None:
        try:
            on_partial(result)
        except Exception as err:  # the original failure is what the caller must see
            print(f"labkit bench: could not keep the partial result: {err}", file=sys.stderr)
