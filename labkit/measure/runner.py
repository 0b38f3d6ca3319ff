"""The measurement plan: warmup, decode c1 (cold + warm) and cK lockstep groups, prefill per length, summary.

`run_bench(url, plan)` measures one running endpoint with a recipe's MeasurePlan and returns a BenchResult:
one RequestRecord per request, one GroupRecord per concurrent group, a RunSummary of the named measures
(labkit/records.py), provenance, and the raw /metrics scrapes the counter-derived numbers came from.

Order of one run (every prompt carries a fresh nonce first):
1. cold turn (only when the caller says the engine was just booted, and /metrics shows no request served yet);
2. `decode.warmup` warmup requests of the decode shape;
3. c1: `decode.turns` sequential turns; cK (K > 1): `decode.turns` groups of K streams fired together;
   /metrics scraped before step 1 and after step 3: speculative acceptance is that window's counter deltas;
4. prefill per target length: prompts fitted to the length in server tokens, `decode.warmup` warmup(s) of that
   length (at most one), then `prefill.repeats` samples at c1, max_tokens=1, /metrics scraped around each.
A request that errors, ends short or without a finish_reason is a failed record, kept but excluded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit import __version__
from labkit.measure import io_probe as iop
from labkit.measure import metrics as mx
from labkit.measure import prompts as pr
from labkit.measure.client import EndpointError, StreamClient, StreamRequest, StreamResult
from labkit.measure.records import SCHEMA_VERSION, GroupRecord, RequestRecord, RunSummary
from labkit.measure.timing import (
    BURST_GAP_NS,
    NS,
    decode_tps,
    decode_window,
    first_arrival_merged,
    group_aggregate,
    median,
    prefill_tps,
)
from labkit.measure.tokencount import make_counter
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan, repo_root

TIMER = ("time.perf_counter_ns; t_send before the SDK call, chunk stamps at each network read before SSE/JSON "
         "parsing (events in one read share a stamp)")
CACHE_HIT_TOLERANCE = 64  # cached prompt tokens allowed per unique prompt: a shared template preamble (≤ a block)
DECODE_WINDOW = ("decode: (N - n_first) / (t_last - t_first); t_first/n_first = last stamp/tokens of the first "
                 f"arrival (chunks stamped < {BURST_GAP_NS // 1000} us apart), t_last = last token-bearing chunk "
                 "(not [DONE]); burst-read samples excluded")
BURST_SHARE = 0.5  # a stream whose decode tokens came mostly in back-to-back reads has no usable decode timing
BURST_FLAG = "burst-read"
# requests an engine finished since boot: any > 0 means the first request of this run is not a cold one
SERVED_COUNTERS = ("vllm:request_success_total", "vllm:request_success", "sglang:e2e_request_latency_seconds_count")
AGG_WINDOW = ("cK agg: tokens of all streams inside the steady window W = [max t_first, min t_last] / |W|, each "
              "chunk's tokens spread over the gap since its stream's previous chunk; also stored: whole chunks "
              "in W / |W|, and span = sum(N - n_first) / (max t_last - min t_first)")
PREFILL_WINDOW = ("prefill: (P - C) / (t_first - t_send - RTT), t_first = first token-bearing chunk (not the role "
                  "prelude), P = usage.prompt_tokens; raw = P / TTFT")


def default_plan() -> MeasurePlan:
    """The recipe schema's defaults, for measuring a bare URL."""
    return MeasurePlan(api="chat", runs=1, decode=DecodePlan(concurrency=(1, 2), turns=5, output_tokens=256, warmup=1),
                       prefill=PrefillPlan(prompt_tokens=(4096, 12600), repeats=3), timeout=600.0)


@dataclass
class BenchResult:
    """Everything one `run_bench` produced; `save`/`load` round-trip it through one JSON file."""

    records: list[RequestRecord]
    groups: list[GroupRecord]
    summary: RunSummary
    provenance: dict[str, Any]
    scrapes: dict[str, str] = field(default_factory=dict)  # "<phase>.<before|after>[.<i>]" -> raw /metrics text
    io: dict[str, dict[str, float]] = field(default_factory=dict)  # probe name -> counter deltas

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "provenance": self.provenance,
            "summary": self.summary.to_dict(),
            "records": [r.to_row() for r in self.records],
            "groups": [g.to_row() for g in self.groups],
            "io": self.io,
            "scrapes": self.scrapes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchResult:
        return cls(records=[RequestRecord.from_dict(r) for r in data.get("records", [])],
                   groups=[GroupRecord.from_dict(g) for g in data.get("groups", [])],
                   summary=RunSummary.from_dict(data.get("summary", {})),
                   provenance=data.get("provenance", {}), scrapes=data.get("scrapes", {}), io=data.get("io", {}))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=1))
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> BenchResult:
        return cls.from_dict(json.loads(Path(path).read_text()))


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
    if os.environ.get("LABKIT_LOOP") == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def run_bench_async(url: str, plan: MeasurePlan | None = None, *, model: str | None = None,
                          api: str | None = None, cold_expected: bool = True,
                          io_hooks: Sequence[iop.IOProbe] = (), progress: bool = True, lane: str = "",
                          recipe_hash: str | None = None, variant: str | None = None,
                          spec_k: float | None = None, run_id: str | None = None,
                          decode: bool = True, prefill: bool = True, transport: str = "direct",
                          save_to: str | Path | None = None,
                          on_partial: Callable[[BenchResult], None] | None = None) -> BenchResult:
    """Measure the endpoint at `url` (server root or .../v1) with `plan` (a recipe's MeasurePlan).

    `transport`: "direct" (default) or "sdk", see labkit/client.py. `on_partial(result)` is called with what
    was measured when the run is interrupted or fails halfway (provenance partial=True), before re-raising."""
    plan = plan or default_plan()
    async with StreamClient(url, timeout=plan.timeout, transport=transport) as client:
        bench = _Bench(client, plan, model=model, api=api or plan.api, cold_expected=cold_expected,
                       io_hooks=io_hooks, progress=progress, lane=lane, spec_k=spec_k,
                       run_id=run_id or dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"))
        return await bench.run(recipe_hash=recipe_hash, variant=variant, decode=decode, prefill=prefill,
                               save_to=save_to, on_partial=on_partial)


# --------------------------------------------------------------------------------------------------
# One raw stream -> one record (pure: formulas and validity rules only)


def make_record(res: StreamResult, *, t_origin: int, rtt_ns: int, phase: str, requested: int, rep: int = 0,
                run_id: str = "",
                lane: str = "", api: str = "chat", concurrency: int = 1, turn: int = 0, stream: int = 0,
                cold: bool = False, nonce: str = "", group: int | None = None, prompt_target: int = 0,
                counted: int | None = None, counted_source: str = "tokenize") -> RequestRecord:
    """Apply the formulas and validity rules to one raw stream.

    Failed (ok=False, excluded from summaries): transport/HTTP errors, no finish_reason, finish_reason other
    than "length" (the output length was forced), no token count, fewer tokens than requested. Flagged (kept,
    but prefill summaries skip them): prompt length off by more than 1%, prefix-cache hits. `counted` is the
    prompt's server count from the length counter, used for P only when the stream reports no usage.
    """
    prompt_tokens, source = res.prompt_tokens, "usage" if res.prompt_tokens is not None else ""
    if prompt_tokens is None and counted is not None:
        prompt_tokens, source = counted, counted_source

    def rel(t: int | None) -> int | None:
        return None if t is None else t - t_origin

    rec = RequestRecord(
        run_id=run_id, lane=lane, rep=rep, phase=phase, concurrency=concurrency, turn=turn, stream=stream, cold=cold,
        api=api, requested_tokens=requested, prompt_target=prompt_target, prompt_tokens=prompt_tokens,
        prompt_tokens_source=source, cached_tokens=res.cached_tokens, output_tokens=res.output_tokens,
        output_tokens_source=res.output_tokens_source, n_first=res.chunk_n[0] if res.chunk_n else None,
        chunks=len(res.chunk_t), t_send=res.t_send - t_origin, t_hdr=rel(res.t_hdr), t_chunk1=rel(res.t_chunk1),
        t_first=rel(res.t_first), t_content=rel(res.t_content),
        t_second=rel(res.chunk_t[1]) if len(res.chunk_t) > 1 else None, t_last=rel(res.t_last),
        t_end=rel(res.t_end), finish_reason=res.finish_reason, http_status=res.http_status, ok=res.ok,
        error=res.error, group=group, nonce=nonce, response_id=res.response_id, usage=res.usage,
        rtt_s=rtt_ns / NS, chunk_t=[t - t_origin for t in res.chunk_t], chunk_n=list(res.chunk_n or []))
    flags = list(res.warnings)
    if res.t_first is not None:
        rec.ttft_s = (res.t_first - res.t_send) / NS
    if res.t_chunk1 is not None:
        rec.ttfr_s = (res.t_chunk1 - res.t_send) / NS
    if res.t_content is not None:
        rec.ttft_content_s = (res.t_content - res.t_send) / NS
    if rec.ok:
        if res.finish_reason != "length":
            rec.ok, rec.error = False, f"finish_reason {res.finish_reason!r}, expected 'length' (forced length)"
        elif res.output_tokens is None:
            rec.ok, rec.error = False, "no token count (no usage and no token-bearing chunks)"
        elif res.output_tokens < requested:
            rec.ok, rec.error = False, f"short: {res.output_tokens} of {requested} tokens"
        elif res.output_tokens != requested:
            flags.append(f"output {res.output_tokens} != requested {requested}")
    if phase != "prefill" and res.output_tokens is not None and rec.ok and res.chunk_t:  # failed: no rate
        counts = res.chunk_n
        if not counts:
            counts = [1] * len(res.chunk_t)
            flags.append("n_first assumed 1 per chunk (no per-chunk counts)")
        w = decode_window(res.chunk_t, counts, res.output_tokens)
        if res.chunk_n:
            rec.n_first = w.n_first
        rec.decode_tps = decode_tps(res.output_tokens, w.n_first, w.t_start, res.t_last)
        if w.window_tokens <= 0 and len(res.chunk_t) > 1:
            flags.append(f"{BURST_FLAG} (all {res.output_tokens} tokens reached the client in one burst: "
                         "no decode window)")
        elif w.window_tokens > 0 and w.burst_share > BURST_SHARE:
            flags.append(f"{BURST_FLAG} ({w.burst_tokens} of {w.window_tokens} decode tokens reached the client "
                         f"in back-to-back reads < {BURST_GAP_NS // 1000} us apart: it fell behind the stream, so "
                         "their stamps say when they were read, not when they arrived; excluded from decode)")
    if phase == "prefill" and res.t_first is not None and prompt_tokens is not None and rec.ok:
        ttft = res.t_first - res.t_send
        rec.prefill_tps = prefill_tps(prompt_tokens, res.cached_tokens, ttft, rtt_ns)
        rec.prefill_tps_raw = prefill_tps(prompt_tokens, 0, ttft, 0)
        if prompt_target and abs(prompt_tokens - prompt_target) > pr.LENGTH_TOLERANCE * prompt_target:
            flags.append(f"prompt-length-off ({prompt_tokens} vs target {prompt_target})")
        if (res.cached_tokens or 0) > CACHE_HIT_TOLERANCE:
            flags.append(f"prefix-cache-hit ({res.cached_tokens} cached tokens)")
    rec.flags = "; ".join(flags)
    return rec


# --------------------------------------------------------------------------------------------------
# The plan


class _Bench:
    def __init__(self, client: StreamClient, plan: MeasurePlan, *, model: str | None, api: str,
                 cold_expected: bool, io_hooks: Sequence[iop.IOProbe], progress: bool, lane: str,
                 spec_k: float | None, run_id: str):
        self.c, self.plan, self.model, self.api = client, plan, model, api
        self.cold_expected, self.io_hooks, self.lane, self.spec_k, self.run_id = (
            cold_expected, io_hooks, lane, spec_k, run_id)
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
    def _rel(self, t: int | None) -> int | None:
        return None if t is None else t - self.t_origin

    async def _scrape(self, key: str) -> mx.Samples | None:
        if not self.has_metrics:
            return None
        try:
            status, text = await self.c.get("/metrics")
        except EndpointError:
            status, text = 0, ""
        if status != 200:
            self.has_metrics = False
            self.notes.append(f"no /metrics (HTTP {status}): no counter-derived numbers (acceptance, cache hits)")
            return None
        self.scrapes[key] = text
        return mx.parse_prometheus(text)

    def _request(self, prompt: str, max_tokens: int, *, forced: bool) -> StreamRequest:
        return StreamRequest(prompt=prompt, max_tokens=max_tokens, api=self.api, model=self.model or "",
                             min_tokens=max_tokens if forced else None, ignore_eos=forced, temperature=0.0,
                             timeout=self.plan.timeout)

    def _record(self, res: StreamResult, *, phase: str, requested: int, concurrency: int = 1, turn: int = 0,
                stream: int = 0, cold: bool = False, nonce: str = "", group: int | None = None,
                prompt_target: int = 0, counted: int | None = None) -> RequestRecord:
        rec = make_record(res, t_origin=self.t_origin, rtt_ns=self.rtt_ns, phase=phase, requested=requested, rep=self.rep,
                          run_id=self.run_id, lane=self.lane, api=self.api, concurrency=concurrency, turn=turn,
                          stream=stream, cold=cold, nonce=nonce, group=group, prompt_target=prompt_target,
                          counted=counted, counted_source="tokenize" if "tokenize" in self.counter_kind
                          else "calibrated")
        self.records.append(rec)
        if self._bar is not None:
            self._bar.update(1)
        return rec

    # ---------------------------------------------------------------- phases
    async def run(self, *, recipe_hash: str | None, variant: str | None, decode: bool, prefill: bool,
                  save_to: str | Path | None = None,
                  on_partial: Callable[[BenchResult], None] | None = None) -> BenchResult:
        """The whole plan. With `save_to`, the result is written there at the end, and also when the run is
        interrupted or fails halfway (then marked partial, with the error), so no measured request is lost;
        `on_partial` gets that partial result too (the lab path stores it in the run folder)."""
        models = await self.c.models()
        if not self.model:
            if not models:
                raise EndpointError(self.c.base + "/models", "serves no model")
            self.model = models[0]
        elif self.model not in models:
            raise EndpointError(self.c.base + "/models", f"model {self.model!r} not served; have {', '.join(models)}")
        version = await self._engine_version()
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
                    await self._decode(run)
                if prefill and self.plan.prefill.prompt_tokens:
                    await self._prefill(run)
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

    def _keep_partial(self, e: BaseException, version: str | None, models: list[str], recipe_hash: str | None,
                      variant: str | None, save_to: str | Path | None,
                      on_partial: Callable[[BenchResult], None] | None) -> None:
        result = self._result({}, version, models, recipe_hash, variant)
        result.provenance.update(partial=True, error=f"{type(e).__name__}: {e}"[:300])
        if save_to is not None:
            result.save(save_to)
            print(f"labkit bench: partial results ({len(self.records)} requests) in {save_to}", file=sys.stderr)
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

    def _result(self, io: dict, version: str | None, models: list[str], recipe_hash: str | None,
                variant: str | None) -> BenchResult:
        summary = self._summary(io)
        prov = self._provenance(version, models, recipe_hash, variant)
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

    async def _engine_version(self) -> str | None:
        """The engine's version string (vLLM /version, SGLang /server_info); the raw answer goes to provenance."""
        for path in ("/version", "/server_info"):
            try:
                status, text = await self.c.get(path)
            except EndpointError:
                continue
            if status == 200:
                try:
                    data = json.loads(text)
                except ValueError:
                    return text.strip()[:100]
                if isinstance(data, dict) and data.get("version") is not None:
                    self.engine_info = {k: v for k, v in data.items() if isinstance(v, str | int | float | bool)}
                    return str(data["version"])
        return None

    async def _one(self, max_tokens: int, prompt_nonce: str | None = None) -> tuple[StreamResult, str]:
        n = prompt_nonce or pr.nonce()
        return await self.c.stream(self._request(pr.decode_prompt(n), max_tokens, forced=True)), n

    async def _decode(self, run: int) -> None:
        d = self.plan.decode
        N = d.output_tokens
        before = await self._scrape(f"decode.before.{run}")
        flushed = await self._flush_for_acceptance(before)
        n_before = len(self.records)
        cold = self.cold_expected and run == 0
        if cold and before is not None:
            served = mx.total(before, *SERVED_COUNTERS)
            if served:
                cold = False
                self.notes.append(f"cold turn not recorded: /metrics shows {served:g} requests served before the run")
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
                recs = [self._record(r, phase="decode", requested=N, concurrency=k, turn=turn, stream=s,
                                     nonce=nonces[s], group=index) for s, r in enumerate(results)]
                self.groups.append(self._group(recs, k, index))
        after = await self._scrape(f"decode.after.{run}")
        n_window = sum(1 for r in self.records[n_before:] if r.http_status == 200 and r.finish_reason)
        acc = None
        if before is not None and after is not None:
            try:
                sglang = mx.total(after, *mx.S_VERIFY) is not None
                acc = mx.spec_acceptance(before, after, self.spec_k, n_requests=n_window if sglang else None)
            except mx.CounterReset as e:
                self.notes.append(f"acceptance invalid: {e}")
        if acc is None and flushed:
            try:
                status, text = await self.c.get("/server_info")
                acc = mx.server_info_acceptance(json.loads(text)) if status == 200 else None
            except (EndpointError, ValueError):
                acc = None
        if acc is not None:
            self._pool_acceptance(acc)

    def _pool_acceptance(self, acc: mx.Acceptance) -> None:
        """Several runs: pool the counter deltas (never average per-run ratios)."""
        if self.acceptance is None:
            self.acceptance = acc
            return
        a = self.acceptance
        a.accepted += acc.accepted
        a.per_pos = [(p * a.drafts + q * acc.drafts) / (a.drafts + acc.drafts)
                     for p, q in zip(a.per_pos, acc.per_pos, strict=False)]
        a.drafts += acc.drafts
        a.draft_tokens = (a.draft_tokens or 0) + (acc.draft_tokens or 0) or None

    async def _flush_for_acceptance(self, before: mx.Samples | None) -> bool:
        """SGLang without spec counters: reset the cumulative acceptance (POST /flush_cache, idle) so
        /server_info reads this window only. True when the reset succeeded."""
        if before is not None and (mx.total(before, *mx.V_DRAFTS) is not None
                                   or mx.total(before, *mx.S_VERIFY) is not None):
            return False
        try:
            status, text = await self.c.get("/server_info")
            info = json.loads(text) if status == 200 else {}
        except (EndpointError, ValueError):
            return False
        if not isinstance(info, dict) or not info.get("speculative_algorithm"):
            return False
        status, _ = await self.c.post_json("/flush_cache", {})
        if status != 200:
            self.notes.append(f"POST /flush_cache answered HTTP {status}: no per-run acceptance from /server_info")
            return False
        return True

    def _group(self, recs: list[RequestRecord], k: int, index: int) -> GroupRecord:
        g = GroupRecord(run_id=self.run_id, rep=self.rep, concurrency=k, group=index)
        bad = [r for r in recs if not r.ok]
        if bad:
            g.ok, g.note = False, f"{len(bad)} of {k} streams failed"
            return g
        g.burst_streams = sum(BURST_FLAG in r.flags for r in recs)
        burst_note = f"{g.burst_streams} stream(s) burst-read: agg excluded" if g.burst_streams else ""
        if any(not r.chunk_n for r in recs):
            est = group_aggregate([first_arrival_merged(r.chunk_t, [1] * len(r.chunk_t)) for r in recs])
            firsts = [r.t_first for r in recs if r.t_first is not None]
            lasts = [r.t_last for r in recs if r.t_last is not None]
            span = max(lasts) - min(firsts) if len(firsts) == len(lasts) == len(recs) else 0
            tokens = sum((r.output_tokens or 0) - 1 for r in recs)
            g.span_tps = tokens * NS / span if span > 0 and tokens > 0 else None
            g.overlap, g.window_start, g.window_end = est.overlap, est.window_start, est.window_end
            g.note = "; ".join(filter(None, ["no per-chunk token counts: span estimator only (n_first assumed 1)",
                                             burst_note]))
            g.serialised = est.serialised
            return g
        est = group_aggregate([first_arrival_merged(r.chunk_t, r.chunk_n) for r in recs])
        g.agg_tps, g.window_tps, g.span_tps, g.overlap = est.agg_tps, est.window_tps, est.span_tps, est.overlap
        g.window_start, g.window_end, g.window_tokens, g.serialised = (
            est.window_start, est.window_end, est.window_tokens, est.serialised)
        serial = "streams did not overlap: the engine serialised them; not a concurrency measurement"
        g.note = "; ".join(filter(None, [serial if est.serialised else "", burst_note]))
        return g

    async def _fit_counter(self) -> None:
        """Choose how prompt lengths are counted in server tokens (labkit/tokencount.py)."""
        if self.counter is None:
            self.counter, self.counter_kind = await make_counter(self.c, self.model or "", self.api)

    async def _prefill(self, run: int) -> None:
        await self._fit_counter()
        self.rtt_ns = await self.c.rtt_ns()
        p = self.plan.prefill
        for target in p.prompt_tokens:
            warm = min(self.plan.decode.warmup, 1)
            for i in range(warm + p.repeats):
                prompt, counted, n = await pr.fit_prompt(target, self.counter)
                key = f"prefill.{target}.{run}.{i}"
                before = await self._scrape(key + ".before")
                res = await self.c.stream(self._request(prompt, 1, forced=True))
                after = await self._scrape(key + ".after")
                learn = getattr(self.counter, "add", None)
                if learn is not None and res.prompt_tokens is not None:
                    learn(prompt, res.prompt_tokens)  # a fitted counter improves with every server count
                rec = self._record(res, phase="warmup" if i < warm else "prefill", requested=1, turn=i - warm,
                                   nonce=n, prompt_target=target, counted=counted)
                if before is not None and after is not None:
                    try:
                        pc = mx.prefix_cache(before, after)
                    except mx.CounterReset as e:
                        pc = None
                        rec.flags = "; ".join(filter(None, [rec.flags, str(e)]))
                    if pc is not None:
                        hits, queries = pc
                        if i >= warm:
                            self.pc_window.append(pc)
                        if hits > CACHE_HIT_TOLERANCE and "prefix-cache-hit" not in rec.flags:
                            rec.flags = "; ".join(filter(None, [rec.flags, f"prefix-cache-hit ({hits:g} hit tokens)"]))

    # ---------------------------------------------------------------- summary + provenance
    def _summary(self, io: dict[str, dict[str, float]]) -> RunSummary:
        s = RunSummary()
        ok = [r for r in self.records if r.ok]
        s.n_ok, s.n_failed = len(ok), len(self.records) - len(ok)
        sources = sorted({r.output_tokens_source for r in ok if r.output_tokens_source})
        src = ", ".join(sources) or "none"

        def put(key: str, values: list[float], how: str) -> None:
            values = [v for v in values if v is not None]
            if not values:
                return
            s.measures[key] = median(values)
            s.samples[key] = values
            s.ranges[key] = [min(values), max(values)]
            s.method[key] = how

        dec_all = [r for r in ok if r.phase == "decode"]
        dec = [r for r in dec_all if BURST_FLAG not in r.flags]
        if len(dec) < len(dec_all):
            s.notes.append(f"decode: {len(dec_all) - len(dec)} burst-read sample(s) excluded (the client fell "
                           "behind the stream; see the records' flags)")
        put("decode_c1", [r.decode_tps for r in dec if r.concurrency == 1 and not r.cold],
            f"median over warm c1 turns; {DECODE_WINDOW}; tokens: {src}; timer: perf_counter_ns")
        put("decode_c1_cold", [r.decode_tps for r in dec if r.cold],
            "the first request after boot (cold turn), same formula as decode_c1")
        put("ttft_c1", [r.ttft_s for r in dec_all if r.concurrency == 1 and not r.cold],  # burst-read: TTFT holds
            "median t_first - t_send of warm c1 decode turns, seconds")
        for k in sorted({g.concurrency for g in self.groups}):
            gs = [g for g in self.groups if g.concurrency == k and g.ok]
            put(f"decode_c{k}_agg", [g.agg_tps for g in gs if not g.serialised and not g.burst_streams],
                f"median over lockstep groups of {k}; {AGG_WINDOW}; tokens: {src}")
            put(f"decode_c{k}_span", [g.span_tps for g in gs if not g.burst_streams], f"span estimator, {k} streams")
            put(f"decode_c{k}_overlap", [g.overlap for g in gs], "|steady window| / span")
            if any(g.serialised for g in gs):
                s.notes.append(f"c{k}: {sum(g.serialised for g in gs)} group(s) ran serialised (no overlap)")
        pre = [r for r in ok if r.phase == "prefill"]
        for target in self.plan.prefill.prompt_tokens:
            rows = [r for r in pre if r.prompt_target == target]
            clean = [r for r in rows if "prefix-cache-hit" not in r.flags and "prompt-length-off" not in r.flags]
            if len(clean) < len(rows):
                s.notes.append(f"prefill_{target}: {len(rows) - len(clean)} flagged sample(s) excluded")
            put(f"prefill_{target}", [r.prefill_tps for r in clean],
                f"median; {PREFILL_WINDOW}; RTT {self.rtt_ns / 1e6:.2f} ms; prompt length via {self.counter_kind}")
            put(f"prefill_{target}_raw", [r.prefill_tps_raw for r in clean], "P / TTFT, no RTT correction")
            put(f"prefill_{target}_ttft", [r.ttft_s for r in clean], "median TTFT, seconds")
        a = self.acceptance
        if a is not None:
            s.measures.update(accept_per_draft=a.per_draft, accept_length=a.length, accept_k=a.k, accept_rate=a.rate)
            for i, v in enumerate(a.per_pos):
                s.measures[f"accept_pos_{i}"] = v
            for key in ("accept_per_draft", "accept_length", "accept_k", "accept_rate"):
                s.method[key] = a.method + " over the decode window (cold, warmup, c1, cK)"
            s.counters.update(spec_accepted=a.accepted, spec_drafts=a.drafts)
            if a.draft_tokens is not None:
                s.counters["spec_draft_tokens"] = a.draft_tokens
        if self.pc_window:
            hits = sum(h for h, _ in self.pc_window)
            queries = sum(q for _, q in self.pc_window)
            s.counters.update(prefix_cache_hits=hits, prefix_cache_queries=queries)
            if queries:
                s.measures["prefix_cache_hit_ratio"] = hits / queries
                s.method["prefix_cache_hit_ratio"] = "Δhits/Δqueries over prefill samples (unique prompts: ~0)"
        if io:
            self._nfs_summary(s, io)
        if s.n_failed:
            s.notes.append(f"{s.n_failed} failed request(s) excluded: " +
                           "; ".join(sorted({r.error for r in self.records if not r.ok}))[:300])
        s.notes = self.notes + s.notes
        return s

    @staticmethod
    def _nfs_summary(s: RunSummary, io: dict[str, dict[str, float]]) -> None:
        """NFS bytes read, only where a probe saw an NFS mount: a node without one proves nothing about
        the NAS, and a counter that went backwards (remount) is reported, never counted as zero."""
        seen = sorted(name for name, d in io.items() if any(k.endswith(":serverreadbytes") for k in d))
        reset = sorted(name for name, d in io.items() if any(k.endswith(":serverreadbytes.reset") for k in d))
        if reset:
            s.notes.append(f"shared-NFS reads not recorded: the counters went backwards on {', '.join(reset)} "
                           "(remount or reboot during the run)")
            return
        if not seen:
            s.notes.append(f"shared-NFS reads not measured: no NFS mount seen by {', '.join(sorted(io))}")
            return
        nfs = sum(iop.server_read_bytes(io[name]) for name in seen)
        s.measures["nfs_read_bytes"] = nfs
        s.method["nfs_read_bytes"] = f"Δserverreadbytes of the NFS mounts on {', '.join(seen)}, whole run"
        if s.n_ok:
            s.measures["nfs_read_bytes_per_completion"] = nfs / s.n_ok

    def _provenance(self, version: str | None, models: list[str], recipe_hash: str | None,
                    variant: str | None) -> dict[str, Any]:
        import openai
        sha, dirty = _git_state()
        return {
            "labkit_version": __version__, "git_sha": sha, "git_dirty": dirty,
            "endpoint": self.c.base, "engine_version": version, "engine_info": self.engine_info,
            "simulated": bool(self.engine_info.get("simulated", False)), "http_backend": self.c.backend,
            "transport": self.c.transport, "model": self.model, "models_served": models,
            "lane": self.lane, "recipe_hash": recipe_hash, "variant": variant, "run_id": self.run_id,
            "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "hostname": socket.gethostname(),
            "api": self.api, "token_sources": sorted({r.output_tokens_source for r in self.records
                                                      if r.output_tokens_source}),
            "prompt_length_counter": self.counter_kind, "timer": TIMER, "t_origin_ns": self.t_origin, "rtt_s": self.rtt_ns / NS,
            "windows": {"decode": DECODE_WINDOW, "agg": AGG_WINDOW, "prefill": PREFILL_WINDOW,
                        "acceptance": "counter deltas between /metrics scrapes around the decode phase"},
            "plan": dataclasses.asdict(self.plan), "cold_expected": self.cold_expected,
            "python": platform.python_version(), "openai_sdk": openai.__version__,
            "event_loop": type(asyncio.get_running_loop()).__module__,
            "io_probes": [p.name for p in self.io_hooks],
        }


def _git_state() -> tuple[str | None, bool | None]:
    root = repo_root()
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(root), "status", "--porcelain"], capture_output=True,
                                    text=True, timeout=10).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None
    return sha, dirty if sha else None



# --------------------------------------------------------------------------------------------------
# CLI
