"""The measurement plan: the registry's workloads, repetition by repetition, then the summary.

`run_bench(url, plan)` measures one running endpoint with a recipe's MeasurePlan and returns a BenchResult:
one RequestRecord per request, one GroupRecord per concurrent group, a RunSummary of the named measures
(labkit/measure/records.py), provenance, and the raw /metrics scrapes the counter-derived numbers came from.

Order of one repetition, the registry's (labkit/measure/workloads/; every prompt carries a fresh nonce first):
1. cold turn (only when the caller says the engine was just booted, and /metrics shows no request served yet);
2. `decode.warmup` warmup requests of the decode shape;
3. c1: `decode.turns` sequential turns; cK (K > 1): `decode.turns` groups of K streams fired together;
   /metrics scraped before step 1 and after step 3: speculative acceptance is that window's counter deltas;
   then, with `measure.content`, c1 turns on the corpus prompts of each category, each in windows of its own;
   then, with `[measure.agentic]`, multi-turn sessions, and with `measure.idle_s`, a request after each pause;
   then, with `[measure.depth]`, requests at each context depth, the context uncached and cached;
4. prefill per target length: prompts fitted to the length in server tokens, `decode.warmup` warmup(s) of that
   length (at most one), then `prefill.repeats` samples at c1, max_tokens=1, /metrics scraped around each;
5. with `[measure.canary]`, the canary after the others (and before them, but on the boot's first repetition).
A request that errors, ends short or without a finish_reason is a failed record, kept but excluded.

`Bench` runs the plan on a `RunContext` (what every workload reads) and keeps what it measured in a `RunLog`
(both in session.py); the records are made in request/recording.py, the counter deltas in server/scrapes.py, and outcome.py
turns the log into the BenchResult (the summary in summary/compose.py, the provenance in provenance.py).
`BenchOptions` holds everything a caller may set: the run settings `RunContext` shares (`RunSettings`)
and what run_bench resolves or uses itself; `BenchOptions.with_lane` adds what a lane plan fixes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime as dt
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labkit import settings
from labkit.measure.outcome import bench_result, io_deltas, keep_partial
from labkit.measure.provenance import engine_version
from labkit.measure.records import BenchResult, RequestRecord
from labkit.measure.request.client import EndpointError, StreamClient
from labkit.measure.server.kvpool import read_kv_pool
from labkit.measure.server.metrics import configured_k
from labkit.measure.session import RunContext, RunLog, RunSettings, Session
from labkit.measure.telemetry.sampling import NodeTelemetry, as_telemetry
from labkit.measure.workloads import WORKLOADS, Workload
from labkit.nodes import Host
from labkit.recipe import Api, DecodePlan, LanePlan, MeasurePlan, PrefillPlan


def default_plan() -> MeasurePlan:
    """The recipe schema's defaults, for measuring a bare URL."""
    return MeasurePlan(
        api="chat",
        runs=1,
        decode=DecodePlan(concurrency=(1, 2), turns=5, output_tokens=256, warmup=1),
        prefill=PrefillPlan(prompt_tokens=(4096, 12600), repeats=3),
        timeout=600.0,
    )


@dataclass(frozen=True, kw_only=True)
class BenchOptions(RunSettings):
    """Everything a caller of `run_bench` may set besides the URL and the plan: the run settings (RunSettings,
    session.py, which the workloads read as they are given) and what `run_bench` resolves or uses itself. The
    defaults measure a bare endpoint just booted, both phases, with a progress bar.

    `telemetry`: hosts (or a NodeTelemetry, for its period and health-mark settings) to sample GPU power,
    clocks and memory on while the plan runs, one long-lived command per node; the summary gets
    `telemetry` and the result `telemetry` ({node: CSV}) (docs/measurement.md, "Node telemetry").
    `kv_pool`: the pool as the lane's boot already read it (BootFacts.kv_pool), so it is not read again.
    `transport`: "direct" (default) or "sdk", see labkit/measure/request/client.py. `save_to`: the result is written
    there at the end, and also when the run is interrupted or fails halfway (then marked partial, with the
    error); `on_partial(result)` is called with that partial result too, before re-raising."""

    cold_expected: bool = True  # a bare endpoint is taken as just booted: record a cold turn
    api: Api | None = None  # None: the plan's
    run_id: str | None = None  # None: the UTC time the run starts
    telemetry: NodeTelemetry | Sequence[Host] | None = None
    progress: bool = True
    decode: bool = True
    prefill: bool = True
    transport: str = "direct"
    save_to: str | Path | None = None
    on_partial: Callable[[BenchResult], None] | None = None
    kv_pool: dict[str, Any] | None = None

    def with_lane(self, plan: LanePlan) -> BenchOptions:
        """These options with the settings `plan`'s lane fixes: its label, hash and variant, the configured
        K and where it came from, whether its model loops and whether it asked for the engine's per-request
        metrics. A method on the options, not a constructor taking `**rest`, so the type checker still
        checks the caller's own keywords."""
        k_found = configured_k(plan.engine)  # K from the recipe, with where it came from
        return dataclasses.replace(
            self,
            lane=plan.label,
            recipe_hash=plan.recipe_hash,
            variant=plan.variant_id,
            spec_k=k_found[0] if k_found else None,
            spec_k_source=k_found[1] if k_found else "",
            loops_expected=plan.model.loops,
            engine_metrics_asked=plan.engine_metrics_asked,
        )


class Bench(Session):
    """One measurement of one endpoint: runs the plan's phases on an open StreamClient and keeps every record,
    group, scrape and note in its log; `run` returns them as a BenchResult."""

    def __init__(self, ctx: RunContext, *, progress: bool, kv_pool: dict[str, Any] | None = None) -> None:
        super().__init__(ctx, RunLog(kv_pool=dict(kv_pool or {})))
        self.progress = progress

    async def run(
        self,
        *,
        decode: bool,
        prefill: bool,
        save_to: str | Path | None = None,
        on_partial: Callable[[BenchResult], None] | None = None,
    ) -> BenchResult:
        """The whole plan. With `save_to`, the result is written there at the end, and also when the run is
        interrupted or fails halfway (then marked partial, with the error), so no measured request is lost;
        `on_partial` gets that partial result too (the lab path stores it in the run folder)."""
        await self._served()
        ctx, log, plan = self.ctx, self.log, self.ctx.plan
        io_before = {p.name: p.sample() for p in ctx.io_hooks}
        workloads = active_workloads(plan, decode, prefill)
        total = planned_requests(plan, ctx.cold_expected, decode, prefill)
        bar = None
        if self.progress:
            from labkit.progress import progress

            bar = ticks = progress(total=total, desc="bench", unit="req", file=sys.stderr, leave=False)

            def tick(_rec: RequestRecord) -> None:
                ticks.update(1)

            self.on_record = tick
            self.say = self._say
        try:
            if ctx.telemetry is not None:  # its lifetime on the nodes: the plan's timeout budget
                ctx.telemetry.start(max_seconds=(total + 10) * plan.timeout)
            for rep in range(plan.runs):
                self.rep = rep
                for w in workloads:
                    if w.before is not None:
                        await w.before(self, rep)
                for w in workloads:
                    await w.run(self, rep)
        except BaseException as e:  # interrupted or crashed: keep what was measured, then re-raise
            self.stop_telemetry()
            if log.records:
                keep_partial(self.ctx, log, e, save_to, on_partial)
            raise
        finally:
            self.stop_telemetry()
            if bar is not None:
                bar.close()
        io = io_deltas(self.ctx, log, io_before)
        result = bench_result(self.ctx, log, io)
        if save_to is not None:
            result.save(save_to)
        return result

    async def _served(self) -> None:
        """Before any window: the model (checked against /models), the engine's version and info, the KV
        pool when the boot did not read it (two GETs; docs/engines.md, "KV pool sources") and the RTT."""
        c, log = self.ctx.client, self.log
        log.models = models = await c.models()
        model = self.ctx.model
        if not model:
            if not models:
                raise EndpointError(c.base + "/models", "serves no model")
            self.ctx = dataclasses.replace(self.ctx, model=models[0])
        elif model not in models:
            raise EndpointError(c.base + "/models", f"model {model!r} not served; have {', '.join(models)}")
        log.version, log.engine_info = await engine_version(c)
        if not log.kv_pool:
            log.kv_pool = await read_kv_pool(c)
        log.rtt_ns = await c.rtt_ns()

    @staticmethod
    def _say(line: str) -> None:
        """A progress line on stderr (Session.say: the idle workload's while it waits, the depths')."""
        print(f"bench: {line}", file=sys.stderr, flush=True)

    def stop_telemetry(self) -> None:
        """End the node samplers (idempotent): before the result is made, and whatever ended the run."""
        if self.ctx.telemetry is not None:
            self.ctx.telemetry.stop()


def active_workloads(plan: MeasurePlan, decode: bool = True, prefill: bool = True) -> list[Workload]:
    """The registry's workloads this plan asks for, among the halves the caller asked for, in run order."""
    return [w for w in WORKLOADS.values() if w.runs_in(decode, prefill) and w.active(plan)]


def planned_requests(
    plan: MeasurePlan, cold_expected: bool, decode: bool = True, prefill: bool = True
) -> int:
    """How many requests the plan sends (the progress bar's total): each active workload's count, summed."""
    return sum(w.planned(plan, cold_expected) for w in active_workloads(plan, decode, prefill))


# --------------------------------------------------------------------------------------------------
# Public entry points


def run_bench(url: str, plan: MeasurePlan | None = None, options: BenchOptions | None = None) -> BenchResult:
    """Synchronous `run_bench_async`; also works inside Jupyter, where an event loop is already running
    (the measurement then runs on its own loop in a worker thread, so the notebook's loop is not blocked
    by, nor interleaved with, the timed streams). The loop is uvloop's when installed (less client CPU
    per streamed chunk; the figures are in labkit/measure/request/client.py's docstring).

    Ctrl-C (a kernel interrupt) while the worker measures cancels its streams at once, lets the partial
    result be saved (`save_to` / `on_partial`), and then raises KeyboardInterrupt here."""

    def measure(box: dict[str, Any]) -> BenchResult:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            box["loop"] = runner.get_loop()
            return runner.run(run_bench_async(url, plan, options))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return measure({})
    box: dict[str, Any] = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="labkit-bench")
    future = pool.submit(measure, box)
    pool.shutdown(wait=False)
    try:
        return future.result()
    except KeyboardInterrupt:
        loop = box.get("loop")
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(_cancel_all, loop)
        try:
            future.exception(timeout=60)  # the worker saves what was measured, then ends
        except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
            pass
        raise


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


def _loop_factory() -> Any:
    """uvloop's event loop when available (LABKIT_LOOP=asyncio forces the standard one)."""
    if settings.current().loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def run_bench_async(
    url: str, plan: MeasurePlan | None = None, options: BenchOptions | None = None
) -> BenchResult:
    """Measure the endpoint at `url` (server root or .../v1) with `plan` (a recipe's MeasurePlan, else
    `default_plan()`) and `options` (BenchOptions: what the run is labelled, told and given)."""
    plan = plan or default_plan()
    o = options or BenchOptions()
    async with StreamClient(url, timeout=plan.timeout, transport=o.transport) as client:
        # the shared settings as given; then what run_bench resolves: the API, the run id, the samplers
        shared: dict[str, Any] = {f.name: getattr(o, f.name) for f in dataclasses.fields(RunSettings)}
        if o.spec_k is not None and not o.spec_k_source:
            shared["spec_k_source"] = "given by the caller"
        ctx = RunContext(
            **shared,
            client=client,
            plan=plan,
            api=o.api or plan.api,
            run_id=o.run_id or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"),
            telemetry=as_telemetry(o.telemetry),
        )
        bench = Bench(ctx, progress=o.progress, kv_pool=o.kv_pool)
        return await bench.run(decode=o.decode, prefill=o.prefill, save_to=o.save_to, on_partial=o.on_partial)
