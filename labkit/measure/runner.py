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

`Bench` runs the plan and keeps what it measured; the records are made in recording.py, the counter deltas in
scrapes.py, the summary in summary.py and the provenance in provenance.py.
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
from labkit.measure import prompts as pr
from labkit.measure.client import EndpointError, StreamClient, StreamRequest
from labkit.measure.provenance import engine_version, provenance
from labkit.measure.recording import make_group, make_record
from labkit.measure.records import BenchResult, GroupRecord, RequestRecord
from labkit.measure.scrapes import (
    flush_for_acceptance,
    pool_acceptance,
    prefix_cache_sample,
    served_before,
    window_acceptance,
)
from labkit.measure.sse import StreamResult
from labkit.measure.summary import summarize
from labkit.measure.tokencount import make_counter
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
        spec_k: float | None,
        run_id: str,
    ):
        self.c, self.plan, self.model, self.api = client, plan, model, api
        self.cold_expected, self.io_hooks, self.lane, self.spec_k, self.run_id = (
            cold_expected,
            io_hooks,
            lane,
            spec_k,
            run_id,
        )
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
        self.engine_info: dict[str, Any] = {}
        self.rep = 0  # current repetition of the plan

    # ---------------------------------------------------------------- helpers
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

    def _request(self, prompt: str, max_tokens: int, *, forced: bool) -> StreamRequest:
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

    def _record(
        self,
        res: StreamResult,
        *,
        phase: str,
        requested: int,
        concurrency: int = 1,
        turn: int = 0,
        stream: int = 0,
        cold: bool = False,
        nonce: str = "",
        group: int | None = None,
        prompt_target: int = 0,
        counted: int | None = None,
    ) -> RequestRecord:
        rec = make_record(
            res,
            t_origin=self.t_origin,
            rtt_ns=self.rtt_ns,
            phase=phase,
            requested=requested,
            rep=self.rep,
            run_id=self.run_id,
            lane=self.lane,
            api=self.api,
            concurrency=concurrency,
            turn=turn,
            stream=stream,
            cold=cold,
            nonce=nonce,
            group=group,
            prompt_target=prompt_target,
            counted=counted,
            counted_source="tokenize" if "tokenize" in self.counter_kind else "calibrated",
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
        self.rtt_ns = await self.c.rtt_ns()
        io_before = {p.name: p.sample() for p in self.io_hooks}
        total = self._planned(decode, prefill)
        if self.progress:
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc="bench", unit="req", file=sys.stderr, leave=False)
        try:
            for run in range(self.plan.runs):
                self.rep = run
                if decode and self.plan.decode.turns > 0:
                    await self.decode(run)
                if prefill and self.plan.prefill.prompt_tokens:
                    await self.prefill(run)
        except BaseException as e:  # interrupted or crashed: keep what was measured, then re-raise
            if self.records:
                self._keep_partial(e, version, models, recipe_hash, variant, save_to, on_partial)
            raise
        finally:
            if self._bar is not None:
                self._bar.close()
        io = self._io_deltas(io_before)
        result = self._result(io, version, models, recipe_hash, variant)
        if save_to is not None:
            result.save(save_to)
        return result

    def _keep_partial(
        self,
        e: BaseException,
        version: str | None,
        models: list[str],
        recipe_hash: str | None,
        variant: str | None,
        save_to: str | Path | None,
        on_partial: Callable[[BenchResult], None] | None,
    ) -> None:
        result = self._result({}, version, models, recipe_hash, variant)
        result.provenance.update(partial=True, error=f"{type(e).__name__}: {e}"[:300])
        if save_to is not None:
            result.save(save_to)
            print(
                f"labkit bench: partial results ({len(self.records)} requests) in {save_to}", file=sys.stderr
            )
        if on_partial is not None:
            try:
                on_partial(result)
            except Exception as err:  # the original failure is what the caller must see
                print(f"labkit bench: could not keep the partial result: {err}", file=sys.stderr)

    def _io_deltas(self, before: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        """Per probe, counters after - before; a probe that fails now costs its figure (noted), not the run."""
        out = {}
        for p in self.io_hooks:
            try:
                out[p.name] = iop.delta(before[p.name], p.sample())
            except Exception as e:
                self.notes.append(f"I/O probe {p.name} failed after the run: {e}"[:300])
        return out

    def _result(
        self, io: dict, version: str | None, models: list[str], recipe_hash: str | None, variant: str | None
    ) -> BenchResult:
        summary = summarize(
            self.records,
            self.groups,
            self.plan,
            acceptance=self.acceptance,
            pc_window=self.pc_window,
            notes=self.notes,
            rtt_ns=self.rtt_ns,
            counter_kind=self.counter_kind,
            io=io,
        )
        prov = provenance(
            self.c,
            self.plan,
            self.records,
            version=version,
            engine_info=self.engine_info,
            model=self.model,
            models=models,
            lane=self.lane,
            recipe_hash=recipe_hash,
            variant=variant,
            run_id=self.run_id,
            api=self.api,
            counter_kind=self.counter_kind,
            t_origin=self.t_origin,
            rtt_ns=self.rtt_ns,
            cold_expected=self.cold_expected,
            io_hooks=self.io_hooks,
        )
        prov["partial"] = False
        return BenchResult(self.records, self.groups, summary, prov, self.scrapes, io)

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
    async def _one(self, max_tokens: int, prompt_nonce: str | None = None) -> tuple[StreamResult, str]:
        n = prompt_nonce or pr.nonce()
        return await self.c.stream(self._request(pr.decode_prompt(n), max_tokens, forced=True)), n

    async def decode(self, run: int) -> None:
        """Cold turn, warmups, c1 turns and cK lockstep groups, between two /metrics scrapes."""
        d = self.plan.decode
        N = d.output_tokens
        before = await self.scrape(f"decode.before.{run}")
        flushed = await flush_for_acceptance(self.c, before, self.notes)
        n_before = len(self.records)
        cold = self.cold_expected and run == 0
        if cold and before is not None:
            served = served_before(before)
            if served:
                cold = False
                self.notes.append(
                    f"cold turn not recorded: /metrics shows {served:g} requests served before the run"
                )
        if cold:
            res, n = await self._one(N)
            self._record(res, phase="decode", requested=N, cold=True, nonce=n, turn=0)
        for i in range(d.warmup):
            res, n = await self._one(N)
            self._record(res, phase="warmup", requested=N, turn=i, nonce=n)
        for k in d.concurrency:
            for turn in range(1, d.turns + 1):
                if k == 1:
                    res, n = await self._one(N)
                    self._record(res, phase="decode", requested=N, turn=turn, nonce=n)
                    continue
                nonces = [pr.nonce() for _ in range(k)]
                reqs = [self._request(pr.decode_prompt(x), N, forced=True) for x in nonces]
                # Lockstep: every stream is created before the first await, so all are sent together.
                results = await asyncio.gather(*(self.c.stream(r) for r in reqs))
                index = len(self.groups)
                recs = [
                    self._record(
                        r,
                        phase="decode",
                        requested=N,
                        concurrency=k,
                        turn=turn,
                        stream=s,
                        nonce=nonces[s],
                        group=index,
                    )
                    for s, r in enumerate(results)
                ]
                self.groups.append(make_group(recs, k, index, run_id=self.run_id, rep=self.rep))
        after = await self.scrape(f"decode.after.{run}")
        n_window = sum(1 for r in self.records[n_before:] if r.http_status == 200 and r.finish_reason)
        acc = await window_acceptance(
            self.c, before, after, spec_k=self.spec_k, n_window=n_window, flushed=flushed, notes=self.notes
        )
        if acc is not None:
            self.acceptance = pool_acceptance(self.acceptance, acc)

    async def _fit_counter(self) -> None:
        """Choose how prompt lengths are counted in server tokens (labkit/measure/tokencount.py)."""
        if self.counter is None:
            self.counter, self.counter_kind = await make_counter(self.c, self.model or "", self.api)

    async def prefill(self, run: int) -> None:
        """Per target length: fitted prompts, a warmup, then the samples, each between two /metrics scrapes."""
        await self._fit_counter()
        self.rtt_ns = await self.c.rtt_ns()
        p = self.plan.prefill
        for target in p.prompt_tokens:
            warm = min(self.plan.decode.warmup, 1)
            for i in range(warm + p.repeats):
                prompt, counted, n = await pr.fit_prompt(target, self.counter)
                key = f"prefill.{target}.{run}.{i}"
                before = await self.scrape(key + ".before")
                res = await self.c.stream(self._request(prompt, 1, forced=True))
                after = await self.scrape(key + ".after")
                learn = getattr(self.counter, "add", None)
                if learn is not None and res.prompt_tokens is not None:
                    learn(prompt, res.prompt_tokens)  # a fitted counter improves with every server count
                rec = self._record(
                    res,
                    phase="warmup" if i < warm else "prefill",
                    requested=1,
                    turn=i - warm,
                    nonce=n,
                    prompt_target=target,
                    counted=counted,
                )
                pc = prefix_cache_sample(rec, before, after)
                if pc is not None and i >= warm:
                    self.pc_window.append(pc)


# --------------------------------------------------------------------------------------------------
# Public entry points


def run_bench(url: str, plan: MeasurePlan | None = None, **kwargs: Any) -> BenchResult:
    """Synchronous `run_bench_async`; also works inside Jupyter, where an event loop is already running
    (the measurement then runs on its own loop in a worker thread, so the notebook's loop is not blocked
    by, nor interleaved with, the timed streams). The loop is uvloop's when installed: ~15% less client CPU
    per streamed chunk than the default loop, measured by benchmarks/bench_accuracy.py.

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
    spec_k: float | None = None,
    run_id: str | None = None,
    decode: bool = True,
    prefill: bool = True,
    transport: str = "direct",
    save_to: str | Path | None = None,
    on_partial: Callable[[BenchResult], None] | None = None,
) -> BenchResult:
    """Measure the endpoint at `url` (server root or .../v1) with `plan` (a recipe's MeasurePlan).

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
            run_id=run_id or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"),
        )
        return await bench.run(
            recipe_hash=recipe_hash,
            variant=variant,
            decode=decode,
            prefill=prefill,
            save_to=save_to,
            on_partial=on_partial,
        )
