"""The decode workload of a Bench's plan: cold turn, warmups, c1 turns and cK lockstep groups, between two
/metrics scrapes whose counter deltas give the window's speculative acceptance.

Every scrape pair is also handed to the run's evidence log as the `decode` window (gauges, finished against
sent, cache hits, counter resets: docs/measurement.md, "Per-run evidence"); a counter that went backwards
anywhere in the window leaves it without acceptance.

/metrics is also scraped between the requests (never inside one): each c1 turn and each cK group has its own
window, and its records carry what the engine's counters say about it (`server_window`, `server_ttft_s`).
The functions take the `Session` being run (labkit/measure/session.py) and add to its log's records, groups and
notes; the window's acceptance is pooled into the log over the repetitions.
"""

from __future__ import annotations

import asyncio

from labkit.measure.prompt import prompts as pr
from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.request.recording import make_group, set_concurrency
from labkit.measure.request.sse import StreamResult
from labkit.measure.server import metrics as mx
from labkit.measure.server.scrapes import flush_for_acceptance, pool_acceptance, served_before
from labkit.measure.server.servertruth import requests_accepted
from labkit.measure.session import RunLog, Session
from labkit.measure.summary.engine import concurrency_measures
from labkit.measure.summary.speed import decode_measures
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.windows import TurnWindows, window_result
from labkit.recipe import MeasurePlan


async def measure_decode(s: Session, run: int) -> mx.Acceptance | None:
    """Cold turn, warmups, c1 turns and cK lockstep groups, between two /metrics scrapes; the window's
    acceptance (None without counters, or when a counter reset inside it, noted)."""
    ctx, log = s.ctx, s.log
    d = ctx.plan.decode
    N = d.output_tokens
    windows = await TurnWindows.opened(s, run, "decode")
    before = windows.first
    flushed = await flush_for_acceptance(ctx.client, before, log.notes)
    n_before = len(log.records)
    if _cold_turn(s, run, before):
        res, n = await _one(s, N, "cold")
        await windows.close(
            [s.record(res, phase="decode", requested=N, cold=True, nonce=n, turn=0)], "the cold turn"
        )
    for i in range(d.warmup):
        res, n = await _one(s, N, f"warmup.{i}")
        await windows.close([s.record(res, phase="warmup", requested=N, turn=i, nonce=n)], f"warmup {i + 1}")
    for k in d.concurrency:
        for turn in range(1, d.turns + 1):
            if k == 1:
                res, n = await _one(s, N, f"c1.{turn}")
                recs = [s.record(res, phase="decode", requested=N, turn=turn, nonce=n)]
                await windows.close(recs, f"c1 turn {turn}")
            else:
                await _lockstep_group(s, k, turn, N, windows)
    after = windows.last if windows.n else await s.scrape(f"decode.after.{run}")
    if not windows.n:
        log.evidence.pair("decode", run, before, after, 0)
    window = log.records[n_before:]
    acc = await window_result(s, "decode", run, before, after, window, flushed)
    if acc is not None:
        _check_requests(log, run, window, acc.accepted)
    return acc


def _check_requests(log: RunLog, run: int, window: list[RequestRecord], counted: float) -> None:
    """The window's per-request accepted counts summed, against its counter delta: a difference means requests
    labkit did not send; the total pools over the windows only while every one of them could be checked."""
    total = requests_accepted(window)
    if total is None or log.request_accepted is None:
        log.request_accepted = None
        return
    log.request_accepted += total
    if total != counted:
        log.notes.append(
            f"per-request accepted draft tokens over the decode window of run {run} sum to {total:g}, the "
            f"engine's counters to {counted:g}"
        )


def _cold_turn(s: Session, run: int, before: mx.Samples | None) -> bool:
    """A cold turn is recorded only on the first repetition after a boot, and not when /metrics shows the
    engine already served requests (the turn would not be cold; noted)."""
    cold = s.ctx.cold_expected and run == 0
    if cold and before is not None:
        served = served_before(before)
        if served:
            cold = False
            s.log.notes.append(
                f"cold turn not recorded: /metrics shows {served:g} requests served before the run"
            )
    return cold


async def _one(s: Session, max_tokens: int, place: str) -> tuple[StreamResult, str]:
    """One forced-length decode request with a fresh nonce, its text from the run's prompt seed and its
    `place` in the run when the run has one; the result and that nonce."""
    n = pr.nonce()
    prompt = pr.decode_prompt(n, s.text_seed(place))
    return await s.ctx.client.stream(s.ctx.stream_request(prompt, max_tokens, forced=True)), n


async def _lockstep_group(s: Session, k: int, turn: int, N: int, windows: TurnWindows) -> None:
    """`k` streams sent together, kept as `k` records and one GroupRecord of their aggregate estimators."""
    nonces = [pr.nonce() for _ in range(k)]
    texts = [pr.decode_prompt(x, s.text_seed(f"c{k}.{turn}.{i}")) for i, x in enumerate(nonces)]
    reqs = [s.ctx.stream_request(text, N, forced=True) for text in texts]
    # Lockstep: every stream is created before the first await, so all are sent together.
    results = await asyncio.gather(*(s.ctx.client.stream(r) for r in reqs))
    groups = s.log.groups
    index = len(groups)
    recs = [
        s.record(
            r,
            phase="decode",
            requested=N,
            concurrency=k,
            turn=turn,
            stream=i,
            nonce=nonces[i],
            group=index,
        )
        for i, r in enumerate(results)
    ]
    group = make_group(recs, k, index, run_id=s.ctx.run_id, rep=s.rep)
    group.server_window = await windows.close(recs, f"c{k} group {turn}")
    set_concurrency(group, recs)
    groups.append(group)


async def _run(s: Session, rep: int) -> None:
    """One repetition's decode window; its acceptance is pooled over the repetitions."""
    acc = await measure_decode(s, rep)
    if acc is not None:
        s.log.acceptance = pool_acceptance(s.log.acceptance, acc)


def _planned(plan: MeasurePlan, cold: bool) -> int:
    d = plan.decode
    return cold + (d.warmup + sum(d.turns * k for k in d.concurrency)) * plan.runs


def _window(rec: RequestRecord) -> str | None:
    """decode_c1 (decode_c1_cold for the cold turn) or decode_c<K> for a lockstep group's streams."""
    if rec.concurrency == 1:
        return "decode_c1_cold" if rec.cold else "decode_c1"
    return f"decode_c{rec.concurrency}"


def _summarize(s: RunSummary, inp: SummaryInput) -> None:
    decode_measures(s, list(inp.ok), inp.groups, inp.src)
    concurrency_measures(s, inp.groups)


DECODE = Workload(
    name="decode",
    recipe_key="decode",
    role="plan",
    half="decode",
    heading="Decode per request",
    table="measured",
    windows=("decode",),
    measures=(
        "decode_c1",
        "decode_c1_cold",
        "ttft_c1",
        "decode_c<N>_agg",
        "decode_c<N>_span",
        "decode_c<N>_overlap",
        "decode_c<N>_concurrency",
    ),
    active=lambda plan: plan.decode.turns > 0,
    planned=_planned,
    run=_run,
    window=_window,
    summarize=_summarize,
)
