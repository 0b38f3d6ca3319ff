"""The seam between a Bench and its workloads: what every workload reads (`RunContext`, fixed for the run),
what the workloads accumulate (`RunLog`, handed whole to outcome.py), and `Session`, the steps every workload
takes on them: a /metrics scrape, a request of the plan's shape, a record, a prompt's text seed.

runner.py's `Bench` is the Session that runs the plan; every workload (labkit/measure/workloads/) measures on a
Session. `RunSettings` is the part of the context a caller sets (runner.py's `BenchOptions` extends it too).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from labkit.measure.prompt import prompts as pr
from labkit.measure.records import GroupRecord, RequestRecord
from labkit.measure.request.client import EndpointError, StreamClient, StreamRequest
from labkit.measure.request.recording import make_record
from labkit.measure.request.sse import StreamResult
from labkit.measure.server import metrics as mx
from labkit.measure.server.scrapes import EvidenceLog
from labkit.measure.telemetry import io_probe as iop
from labkit.measure.telemetry.sampling import NodeTelemetry
from labkit.recipe import Api, MeasurePlan


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """The run settings that mean the same to the caller and to the workloads, declared once: `BenchOptions`
    (what a caller sets, runner.py) and `RunContext` (what the workloads read) both extend it, so
    `run_bench` copies them field by field instead of by a hand-kept list. A subclass rather than a
    `settings` member, because every caller's `BenchOptions(...)` keywords and every workload's `ctx.x` read
    stay as they are. Keyword-only: a class that extends it adds fields without defaults."""

    model: str | None = None  # the served model; None: the first one /models names (Bench.run)
    lane: str = ""
    recipe_hash: str | None = None
    variant: str | None = None
    cold_expected: bool = False  # the engine was just booted: the first repetition records a cold turn
    # the engine's configured draft tokens per step and where that came from (`configured_k(lane.engine)`);
    # None: read from /metrics where the engine exports it
    spec_k: int | None = None
    spec_k_source: str = ""
    # draw prompt texts from it, not from each prompt's nonce, so two lanes run with the same seed see the
    # same texts, place by place, and can be paired (docs/compare.md, "Shared prompt seeds")
    prompt_seed: str | None = None
    io_hooks: Sequence[iop.IOProbe] = ()
    # seconds to wait at a boundary between requests for the busy gauges to read zero before the window is
    # flagged; 0: check, never wait (labkit/measure/server/drain.py)
    drain_timeout: float = 10.0
    # the model loops by nature (a random-weight test model): loops are reported, not gating (summary/sanity.py)
    loops_expected: bool = False
    # the lane turned on the engine's per-request metrics, so responses without them say so (server/servertruth.py)
    engine_metrics_asked: bool = False


@dataclass(frozen=True, kw_only=True)
class RunContext(RunSettings):
    """What every phase reads: the open client, the plan, the request shape and the run-wide labels (the
    settings as the caller gave them, with `run_bench`'s resolutions below)."""

    client: StreamClient
    plan: MeasurePlan
    api: Api  # the caller's, else the plan's
    run_id: str  # the caller's, else the UTC time the run started
    telemetry: NodeTelemetry | None = None  # node samplers while the plan runs (telemetry/sampling.py)
    t_origin: int = field(default_factory=time.perf_counter_ns)  # the records' stamps count from here

    def text_seed(self, rep: int, place: str) -> str | None:
        """What a prompt's text is drawn from: the run's prompt seed, the repetition and the request's place
        in the plan, so the same place gets the same text in every lane run with that seed (its nonce stays
        fresh); None without a prompt seed (the text is then drawn from the nonce). docs/compare.md,
        "Shared prompt seeds"."""
        return None if self.prompt_seed is None else f"{self.prompt_seed}:{rep}:{place}"

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


@dataclass
class RunLog:
    """What a run learned, in the order it was measured: what outcome.py turns into the BenchResult."""

    records: list[RequestRecord] = field(default_factory=list)
    groups: list[GroupRecord] = field(default_factory=list)
    scrapes: dict[str, str] = field(default_factory=dict)  # raw /metrics text per scrape key
    notes: list[str] = field(default_factory=list)
    evidence: EvidenceLog = field(
        default_factory=EvidenceLog
    )  # /metrics per window (labkit/measure/server/scrapes.py)
    acceptance: mx.Acceptance | None = None  # pooled over the repetitions' decode windows
    # Σ per-request accepted drafts over those windows; None once one could not be checked (workloads/decode.py)
    request_accepted: float | None = 0.0
    # per content category: pooled over the repetitions' windows of its turns (workloads/content.py)
    content_acceptance: dict[str, mx.Acceptance] = field(default_factory=dict)
    pc_window: list[tuple[float, float]] = field(default_factory=list)  # (hits, queries) per prefill sample
    # the KV pool with every source the engine offers: a lane's boot facts, else read from the API (Bench.run)
    kv_pool: dict[str, Any] = field(default_factory=dict)
    engine_info: dict[str, Any] = field(default_factory=dict)
    version: str | None = None  # the engine's version string
    models: list[str] = field(default_factory=list)  # what /models served
    rtt_ns: int = 0
    has_metrics: bool = True  # False once /metrics failed: no further scrapes
    counter: pr.Counter | None = None  # prompt-length counter (labkit/measure/prompt/tokencount.py)
    # the engine's gauges sampled while a load level ran, per level window: [seconds from the level's start,
    # running, waiting, KV usage (NaN when not exported)] (labkit/measure/workloads/load.py)
    level_gauges: dict[str, list[list[float]]] = field(default_factory=dict)
    # {window: why} of the load level the engine died in, which ended the run (labkit/measure/workloads/load.py)
    failed_levels: dict[str, str] = field(default_factory=dict)
    counter_kind: str = ""


class Session:
    """The steps every phase takes: scrape /metrics into the log, shape a request, keep its record."""

    def __init__(self, ctx: RunContext, log: RunLog | None = None) -> None:
        self.ctx = ctx
        self.log = RunLog() if log is None else log
        self.rep = 0  # current repetition of the plan
        self.on_record: Callable[[RequestRecord], None] | None = None  # e.g. a progress bar's tick
        # a progress line for what takes long between requests (a pause, fitting contexts); None: quiet
        self.say: Callable[[str], None] | None = None

    async def scrape(self, key: str) -> mx.Samples | None:
        """GET /metrics, kept under `key`; None (and no further tries) once the endpoint has none."""
        log = self.log
        if not log.has_metrics:
            return None
        try:
            status, text = await self.ctx.client.get("/metrics")
        except EndpointError:
            status, text = 0, ""
        if status != 200:
            log.has_metrics = False
            log.notes.append(
                f"no /metrics (HTTP {status}): no counter-derived numbers (acceptance, cache hits)"
            )
            return None
        log.scrapes[key] = text
        return mx.parse_prometheus(text)

    def text_seed(self, place: str) -> str | None:
        """The prompt text seed of `place` in the current repetition (RunContext.text_seed)."""
        return self.ctx.text_seed(self.rep, place)

    def record(self, res: StreamResult, **labels: Any) -> RequestRecord:
        """The stream as this run's RequestRecord, kept and ticked off. `labels` are make_record's
        per-request keywords (phase, requested, concurrency, turn, stream, cold, nonce, group, ...); the
        run-wide ones come from the context (labkit/measure/request/recording.py)."""
        ctx, log = self.ctx, self.log
        rec = make_record(
            res,
            t_origin=ctx.t_origin,
            rtt_ns=log.rtt_ns,
            rep=self.rep,
            run_id=ctx.run_id,
            lane=ctx.lane,
            api=ctx.api,
            counted_source="tokenize" if "tokenize" in log.counter_kind else "calibrated",
            **labels,
        )
        log.records.append(rec)
        if self.on_record is not None:
            self.on_record(rec)
        return rec
