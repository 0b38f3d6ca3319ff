"""The measurement plan: warmup, decode c1 (cold + warm) and cK lockstep groups, prefill per length, summary.

`run_bench(url, plan)` measures one running endpoint with a recipe's MeasurePlan and returns a BenchResult:
one RequestRecord per request, one GroupRecord per concurrent group, a RunSummary of the named measures
(labkit/measure/records.py), provenance, and the raw /metrics scrapes the counter-derived numbers came from.

Order of one run (every prompt carries a fresh nonce first):
1. cold turn (only when the caller says the engine was just booted, and /metrics shows no request served yet);
2. `decode.warmup` warmup requests of the decode shape;
3. c1: `decode.turns` sequential turns; cK (K > 1): `decode.turns` groups of K streams fired together;
   /metrics scraped before step 1 and after step 3: speculative acceptance is that window's counter deltas;
4. prefill per target length: prompts fitted to the length in server tokens, `decode.warmup` warmup(s) of that
   length (at most one), then `prefill.repeats` samples at c1, max_tokens=1, /metrics scraped around each.
A request that errors, ends short or without a finish_reason is a failed record, kept but excluded.

`Bench` runs the plan and keeps what it measured; its phases are decode_phase.py and prefill_phase.py, the
records are made in recording.py, the counter deltas in scrapes.py, and outcome.py turns what was measured
into the BenchResult (the summary in summary.py, the provenance in provenance.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from labkit import settings
from labkit.measure import io_probe as iop
from labkit.measure import metrics as mx
from labkit.measure.client import EndpointError, StreamClient, StreamRequest
from labkit.measure.decode_phase import measure_decode
from labkit.measure.kvpool import read_kv_pool
from labkit.measure.outcome import bench_result, io_deltas, keep_partial
from labkit.measure.prefill_phase import measure_prefill
from labkit.measure.provenance import engine_version
from labkit.measure.recording import make_record
from labkit.measure.records import BenchResult, GroupRecord, RequestRecord
from labkit.measure.scrapes import EvidenceLog
from labkit.measure.sse import StreamResult
from labkit.measure.telemetry_run import NodeTelemetry, as_telemetry
from labkit.nodes import Host
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan


def default_plan() -> MeasurePlan:
    """The recipe schema's defaults, for measuring a bare URL."""
    return MeasurePlan(
        api="chat",
        runs=1,
        decode=DecodePlan(concurrency=(1, 2), turns=5, output_tokens=256, warmup=1),
        prefill=PrefillPlan(prompt_tokens=(4096, 12600), repeats=3),
        timeout=600.0,
    )


class Bench:
    """One measurement of one endpoint: runs the plan's phases on an open StreamClient and keeps every record,
    group, scrape and note; `run` returns them as a BenchResult."""

    def __init__(
        self,
        client: StreamClient,
        plan: MeasurePlan,
        *,
        model: str | None,
        api: str,
        cold_expected: bool,
        io_hooks: Sequence[iop.IOProbe],
        progress: bool,
        lane: str,
        spec_k: int | None,
        run_id: str,
        spec_k_source: str = "",
        prompt_seed: str | None = None,
        telemetry: NodeTelemetry | None = None,
        kv_pool: dict[str, Any] | None = None,
    ):
        self.c, self.plan, self.model, self.api = client, plan, model, api
        self.cold_expected, self.io_hooks, self.lane, self.spec_k, self.run_id = (
            cold_expected,
            io_hooks,
            lane,
            spec_k,
            run_id,
        )
        self.spec_k_source = spec_k_source or ("given by the caller" if spec_k is not None else "")
        self.records: list[RequestRecord] = []
        self.groups: list[GroupRecord] = []
        self.scrapes: dict[str, str] = {}
        self.notes: list[str] = []
        self.t_origin = time.perf_counter_ns()
        self.rtt_ns = 0
        self.has_metrics = True
        self.counter = None  # prompt-length counter
        self.counter_kind = ""
        self._bar = None
        self.progress = progress
        self.acceptance: mx.Acceptance | None = None
        self.pc_window: list[tuple[float, float]] = []
        self.evidence = EvidenceLog()  # what /metrics say about each window (labkit/measure/scrapes.py)
        self.engine_info: dict[str, Any] = {}
        self.rep = 0  # current repetition of the plan
        self.prompt_seed = prompt_seed  # shared prompt texts across runs and lanes (docs/compare.md)
        # the KV pool with every source the engine offers: a lane's boot facts, else read from the API in run()
        self.kv_pool: dict[str, Any] = dict(kv_pool or {})
        self.telemetry = telemetry  # node samplers while the plan runs (labkit/measure/telemetry_run.py)

    # ---------------------------------------------------------------- shared by the phases
    async def scrape(self, key: str) -> mx.Samples | None:
        """GET /metrics, kept under `key`; None (and no further tries) once the endpoint has none."""
        if not self.has_metrics:
            return None
        try:
            status, text = await self.c.get("/metrics")
        except EndpointError:
            status, text = 0, ""
        if status != 200:
            self.has_metrics = False
            self.notes.append(
                f"no /metrics (HTTP {status}): no counter-derived numbers (acceptance, cache hits)"
            )
            return None
        self.scrapes[key] = text
        return mx.parse_prometheus(text)

    def text_seed(self, place: str) -> str | None:
        """What a prompt's text is drawn from: the run's prompt seed, the repetition and the request's place
        in the plan, so the same place gets the same text in every lane run with that seed (its nonce stays
        fresh); None without a prompt seed (the text is then drawn from the nonce). docs/compare.md,
        "Shared prompt seeds"."""
        return None if self.prompt_seed is None else f"{self.prompt_seed}:{self.rep}:{place}"

    def stream_request(self, prompt: str, max_tokens: int, *, forced: bool) -> StreamRequest:
        """A greedy request with the plan's timeout; `forced` pins its length (min_tokens, ignore_eos)."""
        return StreamRequest(
            prompt=prompt,
            max_tokens=max_tokens,
            api=self.api,
            model=self.model or "",
            min_tokens=max_tokens if forced else None,
            ignore_eos=forced,
            temperature=0.0,
            timeout=self.plan.timeout,
        )

    def record(self, res: StreamResult, **labels: Any) -> RequestRecord:
        """The stream as this run's RequestRecord, kept and ticked off. `labels` are make_record's
        per-request keywords (phase, requested, concurrency, turn, stream, cold, nonce, group, ...); the
        run-wide ones come from this Bench (labkit/measure/recording.py)."""
        rec = make_record(
            res,
            t_origin=self.t_origin,
            rtt_ns=self.rtt_ns,
            rep=self.rep,
            run_id=self.run_id,
            lane=self.lane,
            api=self.api,
            counted_source="tokenize" if "tokenize" in self.counter_kind else "calibrated",
            **labels,
        )
        self.records.append(rec)
        if self._bar is not None:
            self._bar.update(1)
        return rec

    # ---------------------------------------------------------------- the whole plan
    async def run(
        self,
        *,
        recipe_hash: str | None,
        variant: str | None,
        decode: bool,
        prefill: bool,
        save_to: str | Path | None = None,
        on_partial: Callable[[BenchResult], None] | None = None,
    ) -> BenchResult:
        """The whole plan. With `save_to`, the result is written there at the end, and also when the run is
        interrupted or fails halfway (then marked partial, with the error), so no measured request is lost;
        `on_partial` gets that partial result too (the lab path stores it in the run folder)."""
        models = await self.c.models()
        if not self.model:
            if not models:
                raise EndpointError(self.c.base + "/models", "serves no model")
            self.model = models[0]
        elif self.model not in models:
            raise EndpointError(
                self.c.base + "/models", f"model {self.model!r} not served; have {', '.join(models)}"
            )
        version, self.engine_info = await engine_version(self.c)
        if not self.kv_pool:  # outside every window: two GETs (docs/engines.md, "KV pool sources")
            self.kv_pool = await read_kv_pool(self.c)
        self.rtt_ns = await self.c.rtt_ns()
        io_before = {p.name: p.sample() for p in self.io_hooks}
        total = self._planned(decode, prefill)
        if self.progress:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc="bench", unit="req", file=sys.stderr, leave=False)
        try:
            if self.telemetry is not None:  # its lifetime on the nodes: the plan's timeout budget
                self.telemetry.start(max_seconds=(total + 10) * self.plan.timeout)
            for run in range(self.plan.runs):
                self.rep = run
                if decode and self.plan.decode.turns > 0:
                    await self.decode(run)
                if prefill and self.plan.prefill.prompt_tokens:
                    await self.prefill(run)
        except BaseException as e:  # interrupted or crashed: keep what was measured, then re-raise
            self.stop_telemetry()
            if self.records:
                keep_partial(self, e, version, models, recipe_hash, variant, save_to, on_partial)
            raise
        finally:
            self.stop_telemetry()
            if self._bar is not None:
                self._bar.close()
        io = io_deltas(self, io_before)
        result = bench_result(self, io, version, models, recipe_hash, variant)
        if save_to is not None:
            result.save(save_to)
        return result

    def stop_telemetry(self) -> None:
        """End the node samplers (idempotent): before the result is made, and whatever ended the run."""
        if self.telemetry is not None:
            self.telemetry.stop()

    def _planned(self, decode: bool, prefill: bool) -> int:
        d, p = self.plan.decode, self.plan.prefill
        n = 0
        if decode and d.turns:
            n += self.cold_expected + d.warmup * self.plan.runs
            n += sum(d.turns * k for k in d.concurrency) * self.plan.runs
        if prefill:
            n += len(p.prompt_tokens) * (p.repeats + min(d.warmup, 1)) * self.plan.runs
        return n

    # ---------------------------------------------------------------- phases
    async def decode(self, run: int) -> None:
        """Cold turn, warmups, c1 turns and cK lockstep groups, between two /metrics scrapes
        (labkit/measure/decode_phase.py)."""
        await measure_decode(self, run)

    async def prefill(self, run: int) -> None:
        """Per target length: fitted prompts, a warmup, then the samples, each between two /metrics scrapes
        (labkit/measure/prefill_phase.py)."""
        await measure_prefill(self, run)


# --------------------------------------------------------------------------------------------------
# Public entry points


def run_bench(url: str, plan: MeasurePlan | None = None, **kwargs: Any) -> BenchResult:
    """Synchronous `run_bench_async`; also works inside Jupyter, where an event loop is already running
    (the measurement then runs on its own loop in a worker thread, so the notebook's loop is not blocked
    by, nor interleaved with, the timed streams). The loop is uvloop's when installed (less client CPU
    per streamed chunk; the figures are in labkit/measure/client.py's docstring).

    Ctrl-C (a kernel interrupt) while the worker measures cancels its streams at once, lets the partial
    result be saved (`save_to` / `on_partial`), and then raises KeyboardInterrupt here."""

    def measure(box: dict) -> BenchResult:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            box["loop"] = runner.get_loop()
            return runner.run(run_bench_async(url, plan, **kwargs))

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
    url: str,
    plan: MeasurePlan | None = None,
    *,
    model: str | None = None,
    api: str | None = None,
    cold_expected: bool = True,
    io_hooks: Sequence[iop.IOProbe] = (),
    progress: bool = True,
    lane: str = "",
    recipe_hash: str | None = None,
    variant: str | None = None,
    spec_k: int | None = None,
    spec_k_source: str = "",
    run_id: str | None = None,
    decode: bool = True,
    prefill: bool = True,
    transport: str = "direct",
    save_to: str | Path | None = None,
    on_partial: Callable[[BenchResult], None] | None = None,
    prompt_seed: str | None = None,
    telemetry: NodeTelemetry | Sequence[Host] | None = None,
    kv_pool: dict[str, Any] | None = None,
) -> BenchResult:
    """Measure the endpoint at `url` (server root or .../v1) with `plan` (a recipe's MeasurePlan).

    `spec_k`: the engine's configured draft tokens per step, and `spec_k_source` where it came from (e.g.
    `configured_k(lane.engine)`); without it K is read from /metrics where the engine exports it.

    `prompt_seed`: draw prompt texts from it (not from each prompt's nonce), so two lanes run with the same
    seed see the same texts, place by place, and can be paired (docs/compare.md, "Shared prompt seeds").

    `telemetry`: hosts (or a NodeTelemetry, for its period and health-mark settings) to sample GPU power,
    clocks and memory on while the plan runs, one long-lived command per node; the summary gets
    `telemetry` and the result `telemetry` ({node: CSV}) (docs/measurement.md, "Node telemetry").

    `kv_pool`: the pool as the lane's boot already read it (BootFacts.kv_pool), so it is not read again.

    `transport`: "direct" (default) or "sdk", see labkit/measure/client.py. `on_partial(result)` is called with
    what was measured when the run is interrupted or fails halfway (provenance partial=True), before re-raising."""
    plan = plan or default_plan()
    async with StreamClient(url, timeout=plan.timeout, transport=transport) as client:
        bench = Bench(
            client,
            plan,
            model=model,
            api=api or plan.api,
            cold_expected=cold_expected,
            io_hooks=io_hooks,
            progress=progress,
            lane=lane,
            spec_k=spec_k,
            spec_k_source=spec_k_source,
            run_id=run_id or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"),
            prompt_seed=prompt_seed,
            telemetry=as_telemetry(telemetry),
            kv_pool=kv_pool,
        )
        return await bench.run(
            recipe_hash=recipe_hash,
            variant=variant,
            decode=decode,
            prefill=prefill,
            save_to=save_to,
            on_partial=on_partial,
        )
