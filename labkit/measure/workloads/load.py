"""The load workload: levels of a closed loop (N streams, each sending its next request when its previous one
ended) or of an open loop (requests at intended times drawn at a rate), each level in a window of its own
(`load@load=<N>`, `load@rate=<R>`), its requests stored one record each (docs/measurement.md, "Serving under
load").

Why the streams are parsed after the level: the client parses a stream once no stream is open (so a parse never
delays another stream's stamps), and under load streams never all end; each level's streams are kept stamped and
unparsed (`StreamClient.stream_raw`) until the level drained, then parsed and recorded in send order.

Per level: `warmup` requests one at a time, then the window opens (drain wait and scrape), the level runs, every
request still in flight is awaited (up to the request timeout, a silent stream cut after `stall_s`), the window
closes. An open loop's send times come from its schedule (labkit/measure/request/arrivals.py), seeded by the
recipe's seed and the rate, so two lanes get the same arrivals; each record keeps its intended send time and its
lateness.

An engine that dies mid-level ends the run (`EngineWatch`): a request refused or reset on its connection, or a
level with failures, asks the engine's /health; once that cannot be reached (or answers 5xx) no more request of
the level is sent, the level is recorded and marked failed (RunLog.failed_levels, a note), and an EndpointError
ends the run as any other unreachable endpoint does: the runner keeps the partial result (runner.py, Bench.run)
and a lane's teardown names the dead node (serve/lane.py, Lane.up). No later level runs, and a sweep or capacity
search stops with it.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from dataclasses import dataclass
from typing import NoReturn

from labkit.measure.prompt import prompts as pr
from labkit.measure.prompt.conversation import block_size
from labkit.measure.prompt.lengths import drawn_lengths, length_range
from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.request.arrivals import level_seed, ramped, send_times
from labkit.measure.request.client import EndpointError, StreamClient, StreamRequest, failure_kind
from labkit.measure.request.pacing import SPIN_S, until
from labkit.measure.request.sse import RawStream
from labkit.measure.server import metrics as mx
from labkit.measure.server.scrapes import RUNNING, WAITING, gauges
from labkit.measure.session import Session
from labkit.measure.summary.capacity import next_level, sweep_rates
from labkit.measure.summary.latency import level_stats
from labkit.measure.summary.load import load_measures, load_window, pass_meets, slo_of
from labkit.measure.workloads.agentic import tool_budget
from labkit.measure.workloads.base import SummaryInput, Workload
from labkit.measure.workloads.load_sessions import Turn, run_sessions, session_hits
from labkit.measure.workloads.prefill import fit_counter
from labkit.measure.workloads.windows import TurnWindows
from labkit.recipe import LOAD_TABLE, SLO_TABLE, LoadLoop, LoadPlan, MeasurePlan

PROGRESS_S = 10.0  # a progress line per level this often while it runs
GAUGE_S = 1.0  # the engine's gauges are sampled this often while a level runs
GAUGE_NAMES = (*RUNNING, *WAITING, *mx.KV_USAGE)  # the /metrics lines a level's gauge samples read


@dataclass
class Sent:
    """One request of a level, stamped but not yet parsed: its order, stream, nonce, intended send (ns from
    the run's start; None in a closed loop) and the raw stream."""

    index: int
    stream: int
    nonce: str
    intended_ns: int | None
    raw: RawStream
    turn: int | None = None  # a session level's turn (its stream is the session)
    requested: int | None = None  # its answer's forced length, when drawn (measure.load.range_ratio)
    prompt_target: int = 0  # the prompt length it aimed at


@dataclass(frozen=True)
class LevelPrompts:
    """A level's prompt: the fitted text whose nonce is swapped for a fresh one per request (the shared prefix,
    when the plan has one, comes before the nonce, so only it is shared), `tokens` long by the run's counter;
    `tool_budget`, a session level's tool results in words and punctuation marks (agentic.tool_budget)."""

    text: str
    nonce: str
    tool_budget: int = 0
    tokens: int = 0
    prefix: int = 0  # characters of the shared prefix, never cut

    def fresh(self, length: int | None = None) -> tuple[str, str]:
        """(prompt, nonce) of one request; with `length` below the fitted tokens, the text's tail cut in
        proportion (in words; the server's count of what was sent is the record's)."""
        n = pr.nonce()
        text = self.text.replace(self.nonce, n, 1)
        if length is None or not self.tokens or length >= self.tokens:
            return text, n
        head, body = text[: self.prefix], text[self.prefix :].split(" ")
        keep = max(2, round(len(body) * length / self.tokens))
        return head + " ".join(body[:keep]), n


class EngineWatch:
    """Whether the engine is still there, asked when a level's request fails on its connection and after a
    level with failures (`engine_gone`, one probe at a time); `gone` holds why it is taken as dead, None while
    it answers. The senders stop once it is set."""

    def __init__(self, client: StreamClient) -> None:
        self.client = client
        self.gone: str | None = None
        self._lock = asyncio.Lock()

    async def probe(self) -> str | None:
        """Ask the engine (unless already known gone); why it is gone, else None."""
        async with self._lock:
            if self.gone is None:
                self.gone = await engine_gone(self.client)
        return self.gone

    async def after(self, error: str) -> bool:
        """After a request ended with `error`: a refused or reset connection asks the engine; True once it is
        gone (the sender then stops)."""
        if self.gone is None and failure_kind(error) == "reset":
            await self.probe()
        return self.gone is not None


async def engine_gone(client: StreamClient) -> str | None:
    """Why the engine is taken as dead (its /health cannot be reached, or answers 5xx), None while it answers
    anything else (an endpoint without a /health route answers 404 and is alive)."""
    try:
        status, text = await client.get("/health")
    except EndpointError as e:
        return str(e)
    if status >= 500:
        return f"{client.root}/health: HTTP {status}: {text[:200]}"
    return None


def _plan(s: Session) -> LoadPlan:
    p = LOAD_TABLE.of(s.ctx.plan)
    assert p is not None  # the runner runs this workload only for a plan with load levels
    return p


async def measure_load(s: Session, run: int) -> None:
    """The plan's levels by its profile: as given, the sweep (c1, the widest concurrency, then rates between
    their request rates), or the capacity search (summary/capacity.py); each level with its warm-ups in its
    window, then its records."""
    p = _plan(s)
    prompts = await _fit(s, p)

    async def level(loop: LoadLoop, value: float) -> list[RequestRecord]:
        return await _level(s, p, run, prompts, loop, value)

    if p.profile == "sweep":
        sync = level_stats(await level("closed", 1)).request_rate
        top = level_stats(await level("closed", max(p.concurrency))).request_rate
        rates = sweep_rates(sync or 0.0, top or 0.0, p.sweep_rates)
        if not rates:
            s.log.notes.append(
                f"load sweep: c{max(p.concurrency)} answered {top or 0:.3g} requests/s, not more than c1's "
                f"{sync or 0:.3g}: no rates between them to sweep"
            )
        for rate in rates:
            await level("open", rate)
    elif p.profile == "capacity":
        slo = slo_of(SLO_TABLE.of(s.ctx.plan))
        assert slo is not None  # the recipe's rule: capacity needs [measure.slo]
        results: list[tuple[float, bool]] = []
        while (value := next_level(p.levels, p.loop != "open", results)) is not None:
            results.append((value, pass_meets(await level(p.loop, value), slo, p.max_error_share)))
    else:
        for value in p.levels:
            await level(p.loop, value)


async def _level(
    s: Session, p: LoadPlan, run: int, prompts: LevelPrompts, loop: LoadLoop, level: float
) -> list[RequestRecord]:
    """One pass of one level: its warm-ups one at a time, then the level in its window, then its records
    (numbered as the level's next pass in this repetition)."""
    t0 = time.monotonic()
    for i in range(p.warmup):
        text, n = prompts.fresh()
        res = await s.ctx.client.stream(_request(s, p, text))
        s.record(res, phase="warmup", requested=p.output_tokens, turn=i, nonce=n)
    done = {
        r.load_pass
        for r in s.log.records
        if r.phase == "load" and r.rep == s.rep and r.load_loop == loop and r.load_level == float(level)
    }
    window = load_window(loop, level)
    windows = await TurnWindows.opened(s, run, window)
    opened = windows.first
    watch = EngineWatch(s.ctx.client)
    sent = await _run_level(s, p, loop, level, prompts, window, watch)
    recs = [_record(s, p, loop, level, len(done), x) for x in sorted(sent, key=lambda x: x.index)]
    await windows.close(recs, f"the {len(recs)} requests of {window}")
    if loop == "sessions":
        pc = (
            mx.prefix_cache(opened, windows.last) if opened is not None and windows.last is not None else None
        )
        session_hits(recs, block_size(opened), None if pc is None else pc[0])
    failed = sum(1 for r in recs if not r.ok)
    if failed:
        await watch.probe()
    if s.say is not None:
        again = f" (pass {len(done) + 1})" if done else ""
        s.say(f"{window}{again}: {len(recs)} requests, {failed} failed, in {time.monotonic() - t0:.1f} s")
    if watch.gone is not None:
        _engine_died(s, window, watch.gone)
    return recs


def _engine_died(s: Session, window: str, why: str) -> NoReturn:
    """The level the engine died in, marked failed (RunLog.failed_levels) and noted; then the run ends as on
    any unreachable endpoint, with an EndpointError (the runner keeps what was measured)."""
    s.log.failed_levels[window] = why
    s.log.notes.append(
        f"{window}: the engine stopped answering during the level ({why}): the level is marked failed, no "
        "later level ran, and the run ended there; the levels before it are kept"
    )
    raise EndpointError(s.ctx.client.base, f"the engine died during load level {window}: the run ends here")


async def _fit(s: Session, p: LoadPlan) -> LevelPrompts:
    """The run's load prompt, fitted to `prompt_tokens` server tokens (the longest of its range with a
    `range_ratio`) with the run's counter: a shared prefix of about `shared_prefix_tokens` first when asked,
    then the nonce and the request's own text."""
    await fit_counter(s)
    counter = s.log.counter
    assert counter is not None
    exact = s.log.counter_kind.startswith("server ")
    prefix = ""
    if p.shared_prefix_tokens:
        prefix, _, _ = await pr.fit_prompt(p.shared_prefix_tokens, counter, seed=s.text_seed("load.prefix"))
        prefix += "\n\n"

    async def count(text: str) -> int:
        return await counter(prefix + text)

    longest = length_range(p.prompt_tokens, p.range_ratio)[1]
    text, tokens, n = await pr.fit_prompt(longest, count, exact=exact, seed=s.text_seed("load"))
    budget = await tool_budget(s, p.tool_tokens) if p.sessions else 0
    return LevelPrompts(prefix + text, n, budget, tokens, len(prefix))


def _request(s: Session, p: LoadPlan, text: str, output_tokens: int | None = None) -> StreamRequest:
    req = s.ctx.stream_request(text, output_tokens or p.output_tokens, forced=True)
    req.stall_s = p.stall_s
    return req


def _shaped(s: Session, p: LoadPlan, prompts: LevelPrompts, window: str, k: int) -> tuple[str, str, int, int]:
    """Request k of a level: (prompt, nonce, answer tokens, prompt tokens aimed at), its lengths drawn from the plan's range (seeded by
    the run's seed, the level and k; prompt/lengths.py), else the plan's."""
    plen, olen = drawn_lengths(
        p.prompt_tokens, p.output_tokens, p.range_ratio, f"{s.ctx.plan.seed}/{window}/{k}"
    )
    text, n = prompts.fresh(plen if p.range_ratio else None)
    return text, n, olen, plen


async def _run_level(
    s: Session,
    p: LoadPlan,
    loop: LoadLoop,
    level: float,
    prompts: LevelPrompts,
    window: str,
    watch: EngineWatch,
) -> list[Sent]:
    """The level's requests, every one ended, with a progress line every PROGRESS_S while it runs; no more are
    sent once `watch` found the engine gone."""
    sent: list[Sent] = []
    tasks = [asyncio.create_task(_progress(s, sent, window))] if s.say is not None else []
    if s.log.has_metrics:
        tasks.append(asyncio.create_task(_gauges(s, s.log.level_gauges.setdefault(window, []))))
    try:
        if loop == "closed":
            await _closed(s, p, int(level), prompts, sent, window, watch)
        elif loop == "sessions":
            await _sessions(s, p, int(level), prompts, sent)
        else:
            await _open(s, p, float(level), prompts, sent, window, watch)
    finally:
        for task in tasks:
            task.cancel()
    return sent


async def _gauges(s: Session, out: list[list[float]]) -> None:
    """The engine's running and waiting requests and KV usage, every GAUGE_S while the level runs: what a
    level's queue did over time, which the window's two scrapes (both taken with nothing in flight) cannot
    show. Only the gauges' lines are parsed and kept: this runs on the loop that stamps the streams' reads, and
    parsing a whole /metrics text there would delay those stamps once a second (measured on the simulator's
    14 KB text: 1.7 ms for all of it, 0.1 ms for the gauges' lines; a real engine's text is larger)."""
    t0 = time.monotonic()
    while True:
        await asyncio.sleep(GAUGE_S)
        try:
            status, text = await s.ctx.client.get("/metrics")
        except EndpointError:
            continue
        if status != 200:
            continue
        samples = mx.parse_prometheus("\n".join(x for x in text.splitlines() if x.startswith(GAUGE_NAMES)))
        g = gauges(samples)
        kv = mx.total(samples, *mx.KV_USAGE)
        out.append(
            [
                round(time.monotonic() - t0, 3),
                g.get("running", math.nan),
                g.get("waiting", math.nan),
                math.nan if kv is None else kv,
            ]
        )


async def _progress(s: Session, sent: list[Sent], window: str) -> None:
    t0 = time.monotonic()
    while True:
        await asyncio.sleep(PROGRESS_S)
        if s.say is not None:
            s.say(f"{window}: {len(sent)} requests done after {time.monotonic() - t0:.0f} s")


async def _closed(
    s: Session,
    p: LoadPlan,
    streams: int,
    prompts: LevelPrompts,
    sent: list[Sent],
    window: str,
    watch: EngineWatch,
) -> None:
    """N streams, each sending its next request as soon as its previous one ended, until the level's request
    count is sent or its duration is over (no send after it; the requests in flight are awaited), or the engine
    is gone. With a ramp, stream i starts i/N of the ramp late."""
    order = itertools.count()
    end = None if p.duration_s is None else time.monotonic() + p.duration_s

    async def stream(i: int) -> None:
        if p.ramp_up_s:
            await asyncio.sleep(p.ramp_up_s * i / streams)
        while watch.gone is None:
            k = next(order)
            if p.level_requests is not None and k >= p.level_requests:
                return
            if end is not None and time.monotonic() >= end:
                return
            text, n, olen, plen = _shaped(s, p, prompts, window, k)
            raw = await s.ctx.client.stream_raw(_request(s, p, text, olen))
            sent.append(Sent(k, i, n, None, raw, requested=olen, prompt_target=plen))
            if await watch.after(raw.res.error):
                return

    await asyncio.gather(*(stream(i) for i in range(streams)))


async def _sessions(s: Session, p: LoadPlan, level: int, prompts: LevelPrompts, sent: list[Sent]) -> None:
    """`level` agentic sessions at once (load_sessions.py), each turn a Sent in send order (the session its
    stream)."""
    turns: list[Turn] = []
    try:
        await run_sessions(
            s, p, level, prompts.fresh, lambda text: _request(s, p, text), prompts.tool_budget, turns
        )
    finally:
        sent.extend(
            Sent(k, t.session, t.nonce, t.intended_ns, t.raw, turn=t.turn) for k, t in enumerate(turns)
        )


def schedule(p: LoadPlan, rate: float, seed: int | None) -> tuple[float, ...]:
    """The level's intended send times, seconds from its start: drawn from the recipe's seed and the rate (so
    two lanes get the same), its steady part for the duration less half the ramp, then ramped. A sweep's rates
    are constant unless the recipe says otherwise, as guidellm's are."""
    steady = None if p.duration_s is None else p.duration_s - p.ramp_up_s / 2
    times = send_times(
        rate,
        level_seed(seed, rate),
        arrival=p.arrival or ("constant" if p.profile == "sweep" else "poisson"),
        burstiness=p.burstiness,
        requests=p.level_requests,
        duration_s=steady,
    )
    return ramped(times, p.ramp_up_s)


async def _open(
    s: Session,
    p: LoadPlan,
    rate: float,
    prompts: LevelPrompts,
    sent: list[Sent],
    window: str,
    watch: EngineWatch,
) -> None:
    """Requests sent at their intended times, at most `max_concurrency` in flight when set (a held request
    goes when one ends, and its wait shows as lateness); none once the engine is gone."""
    times = schedule(p, rate, s.ctx.plan.seed)
    cap = asyncio.Semaphore(p.max_concurrency) if p.max_concurrency else None
    start = time.perf_counter_ns() + int(SPIN_S * 1e9)
    tasks: list[asyncio.Task[None]] = []

    async def one(k: int, due: int) -> None:
        try:
            text, n, olen, plen = _shaped(s, p, prompts, window, k)
            raw = await s.ctx.client.stream_raw(_request(s, p, text, olen))
            sent.append(Sent(k, 0, n, due - s.ctx.t_origin, raw, requested=olen, prompt_target=plen))
        finally:
            if cap is not None:
                cap.release()
        await watch.after(raw.res.error)

    for k, t in enumerate(times):
        due = start + int(t * 1e9)
        await until(due)
        if cap is not None:
            await cap.acquire()
        if watch.gone is not None:
            if cap is not None:
                cap.release()
            break
        tasks.append(asyncio.create_task(one(k, due)))
    await asyncio.gather(*tasks)


def _record(s: Session, p: LoadPlan, loop: LoadLoop, level: float, npass: int, x: Sent) -> RequestRecord:
    """One request of the level as its record: parsed now, tagged with the loop, the level, the pass and, for an
    open loop or a session's turn, the intended send and the lateness."""
    rec = s.record(
        x.raw.parsed(),
        phase="load",
        requested=x.requested or p.output_tokens,
        concurrency=1 if loop == "open" else int(level),
        turn=x.index if x.turn is None else x.turn,
        stream=x.stream,
        nonce=x.nonce,
    )
    rec.prompt_target = x.prompt_target
    if x.turn is not None:
        rec.session = x.stream
    rec.load_loop = loop
    rec.load_level = float(level)
    rec.load_pass = npass
    if x.intended_ns is not None:
        rec.t_intended = x.intended_ns
        rec.lateness_s = (rec.t_send - x.intended_ns) / 1e9
    return rec


def _planned(plan: MeasurePlan, cold: bool) -> int:
    """The requests the plan sends, when known before the run (a closed loop by duration: its warm-ups only)."""
    p = LOAD_TABLE.of(plan)
    if p is None:
        return 0
    return (p.requests() or p.warmup * len(p.levels)) * plan.runs


def _summarize(s: RunSummary, inp: SummaryInput) -> None:
    p = LOAD_TABLE.of(inp.plan)
    if p is not None:
        load_measures(
            s, inp.records, p, SLO_TABLE.of(inp.plan), inp.level_gauges or {}, inp.failed_levels or {}
        )


def _window(rec: RequestRecord) -> str | None:
    """load@load=<N> or load@rate=<R>: the level's window; None for a record of no level."""
    return None if rec.load_level is None or not rec.load_loop else load_window(rec.load_loop, rec.load_level)


LOAD = Workload(
    name="load",
    recipe_key="load",
    role="added",
    half="decode",
    heading="Serving under load",
    table="load",
    windows=("load",),
    measures=(
        "load_ttft",
        "load_itl",
        "load_tpot",
        "load_e2el",
        "load_output_tps",
        "load_total_tps",
        "load_request_rate",
        "load_concurrency",
        "load_peak_concurrency",
        "load_errors",
        "load_attainment",
        "load_goodput",
        "load_lateness",
        "load_queue",
        "load_preemptions",
        "load_capacity_streams",
        "load_capacity_rate",
        "load_capacity_sessions",
        "load_turn_ttft_t<T>",
        "load_hit_share",
        "load_eviction_sessions",
    ),
    active=lambda plan: LOAD_TABLE.of(plan) is not None,
    planned=_planned,
    run=measure_load,
    window=_window,
    summarize=_summarize,
    also_keys=("slo",),
    tolerated_failures=lambda plan: p.max_error_share if (p := LOAD_TABLE.of(plan)) else 0.0,
)
