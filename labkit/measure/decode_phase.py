"""The decode phase of a Bench's plan: cold turn, warmups, c1 turns and cK lockstep groups, between two
/metrics scrapes whose counter deltas give the window's speculative acceptance.

Every scrape pair is also handed to the run's evidence log as the `decode` window (gauges, finished against
sent, cache hits, counter resets: docs/measurement.md, "Per-run evidence"); a counter that went backwards
anywhere in the window leaves it without acceptance.

/metrics is also scraped between the requests (never inside one): each c1 turn and each cK group has its own
window, and its records carry what the engine's counters say about it (`server_window`, `server_ttft_s`).
The functions take the `Session` being run (labkit/measure/session.py), add to its log's records, groups and
notes, and return the window's acceptance for the caller to pool.
"""

from __future__ import annotations

import asyncio

from labkit.measure import metrics as mx
from labkit.measure import prompts as pr
from labkit.measure.drain import settled
from labkit.measure.recording import make_group, set_concurrency
from labkit.measure.records import RequestRecord
from labkit.measure.scrapes import (
    flush_for_acceptance,
    served_before,
    server_view,
    window_acceptance,
)
from labkit.measure.servertruth import requests_accepted
from labkit.measure.session import RunLog, Session
from labkit.measure.sse import StreamResult


class TurnWindows:
    """The scrapes between a phase's requests: each one closes a request's window and opens the next, so
    consecutive windows share a scrape and none is taken while a request runs. Every pair goes to the run's
    evidence as `window` (the decode window, or a content category's: content_phase.py)."""

    def __init__(self, s: Session, run: int, before: mx.Samples | None, window: str = "decode") -> None:
        self.s, self.run, self.last, self.n, self.window = s, run, before, 0, window
        self.first = before  # the window's opening scrape, after the drain wait

    @classmethod
    async def opened(cls, s: Session, run: int, window: str) -> TurnWindows:
        """The phase's windows from their opening scrape (key `<window>.before.<run>`), taken after the drain
        wait at the start."""
        key = f"{window}.before.{run}"
        before = await settled(s, await s.scrape(key), key=key, window=window, run=run, where="start")
        return cls(s, run, before, window)

    async def close(self, recs: list[RequestRecord], where: str) -> dict | None:
        """The scrape after `recs` (the requests `where` names): their window's engine view; then, before the
        next window opens, the wait for the engine to drain (labkit/measure/drain.py)."""
        self.n += 1
        key = f"{self.window}.{self.run}.{self.n}"
        now = await self.s.scrape(key)
        self.s.log.evidence.pair(self.window, self.run, self.last, now, len(recs))
        view = server_view(recs, self.last, now)
        # None once /metrics failed: no later window (nor the acceptance) has an end
        self.last = await settled(
            self.s, now, key=key, window=self.window, run=self.run, where=f"after {where}"
        )
        return view


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


async def window_result(
    s: Session,
    window: str,
    run: int,
    before: mx.Samples | None,
    after: mx.Samples | None,
    recs: list[RequestRecord],
    flushed: bool,
) -> mx.Acceptance | None:
    """A measured window's acceptance from its counter deltas, for the decode phase and every phase with
    windows of its own: None (noted) when a counter went backwards inside it, since its deltas then describe
    two engines; `recs` are the window's requests (docs/measurement.md, "Speculative acceptance conventions")."""
    ctx, log = s.ctx, s.log
    reset = log.evidence.reset_in(window, run)
    if reset:
        log.notes.append(f"acceptance invalid: {window} window: {reset}")
        return None
    counted = [r for r in recs if r.ok and r.chunk_n]
    return await window_acceptance(
        ctx.client,
        before,
        after,
        spec_k=ctx.spec_k,
        spec_k_source=ctx.spec_k_source,
        n_window=sum(1 for r in recs if r.http_status == 200 and r.finish_reason),
        flushed=flushed,
        notes=log.notes,
        stream=(sum(r.output_tokens or 0 for r in counted), sum(r.chunks for r in counted)),
    )


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
