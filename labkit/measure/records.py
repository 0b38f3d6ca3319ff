"""What a measurement produces: one RequestRecord per request, a RunSummary of named measures, provenance;
BenchResult holds them all and round-trips them through one JSON file.

These are the shapes the results store writes (requests.csv, run.json) and the reports read back.
Times are integers in nanoseconds from `time.perf_counter_ns()`, relative to the run's start stamp
(`t_send` of a request is when the client handed it to the HTTP stack; chunk stamps are taken when the bytes of
a network read arrive, before any JSON parsing; see labkit/measure/request/client.py).

Measure keys (RunSummary.measures) are written and read only by labkit/measures.py, so reports never parse
labels; what each one is, its unit and direction are rows of the catalogue, labkit/measures.toml
(docs/measurement.md, "The measure catalogue", "Measure keys").
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from labkit.measures import CacheState
from labkit.recipe import Api, LoadLoop

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

SCHEMA_VERSION = 1
T = TypeVar("T", bound="DataclassInstance")  # a record dataclass read back from its dict
# a request's phase (a warmup request is sent but never summarised; docs/measurement.md names each phase)
Phase = Literal[
    "", "warmup", "decode", "content", "agentic", "idle", "depth", "prefill", "canary", "load", "interference"
]
# where the slow-state canary runs: before or after the run's other phases
CanaryWhere = Literal["before", "after"]
ConcurrencySource = Literal[
    "", "engine steps", "client timing"
]  # what a group's effective concurrency is from


def _known_fields(cls: type[T], data: dict[str, Any]) -> T:
    """An instance from a dict, ignoring keys this version does not know (files written by newer labkit)."""
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class RequestRecord:
    """One request as measured. `ok=False` rows are kept for the record but excluded from summaries."""

    run_id: str = ""
    lane: str = ""
    rep: int = 0  # repetition of the measure plan within the run (measure.runs)
    phase: Phase = ""
    content: str = (
        ""  # a "content" turn's category and corpus prompt id (docs/measurement.md, "Prompt content")
    )
    content_id: str = ""
    concurrency: int = 1
    turn: int = 0  # index within its phase
    stream: int = 0  # stream index within a concurrent group
    cold: bool = False  # first request after engine boot
    api: Api = "chat"
    requested_tokens: int = 0
    prompt_target: int = 0  # requested prompt length in server tokens (prefill)
    prompt_tokens: int | None = None
    prompt_tokens_source: str = ""  # "usage" | "tokenize" | ...
    cached_tokens: int | None = None
    output_tokens: int | None = None
    output_tokens_source: str = ""  # "continuous_usage" | "final_usage" | "chunk count"
    n_first: int | None = (
        None  # tokens of the first arrival (first token-bearing chunk + chunks read back-to-back)
    )
    chunks: int = 0  # token-bearing chunks
    t_send: int = 0
    t_hdr: int | None = None  # response headers received
    t_chunk1: int | None = None  # first SSE chunk with non-empty choices (may be a role prelude)
    t_first: int | None = None  # first chunk carrying >= 1 generated token (reasoning or content)
    t_content: int | None = None  # first chunk carrying answer content
    t_second: int | None = None  # second token-bearing chunk (TTST)
    t_last: int | None = None  # last token-bearing chunk: decode ends here, not at t_end
    t_end: int | None = None  # [DONE] / stream close
    ttft_s: float | None = None  # t_first - t_send (labkit's TTFT)
    ttfr_s: float | None = None  # t_chunk1 - t_send (what vllm bench calls TTFT)
    ttft_content_s: float | None = None
    server_ttft_s: float | None = None  # the engine's own TTFT for this request's window (server_window)
    rtt_s: float | None = None  # network round trip measured before the phase (cheap GET)
    decode_tps: float | None = (
        None  # (N - n_first) / (t_last - first arrival's last stamp); timing.decode_window
    )
    prefill_tps: float | None = None  # (P - C) / (TTFT - RTT), first content token; a lower bound
    prefill_tps_raw: float | None = None  # P / TTFT, no RTT correction
    finish_reason: str | None = None
    http_status: int | None = None
    ok: bool = True
    error: str = ""
    flags: str = ""  # e.g. "prefix-cache-hit" — a sample that is suspect but not failed
    group: int | None = None  # concurrency group index (lockstep streams fired together)
    nonce: str = ""  # the prompt's leading nonce (unique per request)
    response_id: str = ""  # the server's completion id (matches engine logs / the simulator's ground truth)
    usage: dict[str, Any] | None = None  # the raw final usage object
    # what the engine's /metrics say about this request's scrape window (one request at c1, the group at cK):
    # requests, mean ttft_s/queue_s/prefill_s/decode_s/e2e_s, generation_tokens, request_steps, engine_steps
    server_window: dict[str, Any] | None = None
    chunk_t: list[int] = field(default_factory=list)  # arrival stamp of every token-bearing chunk
    chunk_n: list[int] = field(default_factory=list)  # tokens in that chunk (empty when unknown)
    # the engine's own figures for this request, from the response's `metrics` object (vLLM with
    # --enable-per-request-metrics / --per-request-spec-decode-metrics): labkit/measure/server/servertruth.py
    engine_metrics: dict[str, Any] | None = None  # the object as the engine sent it
    engine_ttft_s: float | None = None  # queue + time to first token: engine core queue -> first token
    engine_decode_tps: float | None = None  # (N - 1) / generation_time: first to last token in the engine
    ttft_minus_engine_s: float | None = None  # ttft_s - engine_ttft_s
    decode_vs_engine: float | None = None  # decode_tps / engine_decode_tps - 1
    engine_accept_per_draft: float | None = None  # accepted draft tokens per verify step (bonus excluded)
    engine_accept_length: float | None = None  # N / (N - accepted): tokens per engine step of this request
    # output sanity (labkit/measure/summary/sanity.py): when the text ends in an exact repetition, the repeated unit's
    # length in characters and the share of the text the repetition covers; None when it does not
    loop_period: int | None = None
    loop_share: float | None = None
    # agentic sessions and idle turns (labkit/measure/workloads/agentic.py, idle.py; docs/measurement.md,
    # "Agentic sessions", "Idle turns"): the session a turn belongs to (its `turn` counts from 1), the prefix-cache
    # hit tokens the previous turns should give it (least, most), the engine's own hits for it (usage
    # cached_tokens, else its window's counter delta when it ran alone), its turn window's counter delta (all
    # sessions of the turn), and an idle turn's seconds of idle engine before it
    session: int | None = None
    hit_expected: int | None = None
    hit_expected_max: int | None = None
    hit_engine: float | None = None
    hit_window: float | None = None
    idle_s: float | None = None
    # context depth (labkit/measure/workloads/depth.py; docs/measurement.md, "Context depth"): the depth in tokens
    # of context before the question, and how the context was found: "uncached", "cached", or "load" (the
    # request that put it in the cache, not itself a measurement)
    depth: int | None = None
    cache_state: Literal["", "load"] | CacheState = ""
    # the slow-state canary (labkit/measure/workloads/canary.py): "before" or "after" the run's phases
    canary: Literal[""] | CanaryWhere = ""
    # serving under load (labkit/measure/workloads/load.py; docs/measurement.md, "Serving under load"): the loop
    # and its level (N streams of a closed loop, R requests/s of an open one), and for an open loop the intended
    # send (ns from the run's start, as t_send) and the lateness of the actual send, t_send - t_intended
    load_loop: LoadLoop | Literal[""] = ""  # "" for a record of no load level
    load_level: float | None = None
    load_pass: int = (
        0  # the level's pass in its repetition (a capacity search runs its boundary level 3 times)
    )
    t_intended: int | None = None
    lateness_s: float | None = None
    # prefill under decode (labkit/measure/workloads/interference.py; docs/measurement.md, "Prefill under
    # decode"): a running "stream" (its `stream` index), an "arrival" (its `turn` index), or the "load" that put
    # the arrivals' context in the prefix cache before the window; the length of the prompts arriving in its window
    interference: Literal["", "stream", "arrival", "load"] = ""
    arriving_tokens: int | None = None

    @classmethod
    def columns(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def to_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RequestRecord:
        return _known_fields(cls, data)


@dataclass
class GroupRecord:
    """One lockstep group of concurrent streams and its aggregate decode estimators (docs/measurement.md, "Aggregate decode at cK")."""

    run_id: str = ""
    rep: int = 0
    concurrency: int = 2
    group: int = 0  # unique within the run (matches RequestRecord.group)
    ok: bool = True
    agg_tps: float | None = (
        None  # tokens of all streams inside the steady window W / |W|, chunks spread (headline)
    )
    window_tps: float | None = None  # tokens arriving in W / |W| (boundary-chunk biased; kept for comparison)
    span_tps: float | None = None  # sum(N_i - n_first_i) / (max t_last - min t_first)
    overlap: float | None = None  # |W| / span; <= 0 means the engine serialised the streams
    window_start: int | None = None  # W = [max t_first, min t_last], ns relative to the run start
    window_end: int | None = None
    window_tokens: int | None = None  # tokens from all streams arriving in (W_start, W_end]
    serialised: bool = False
    burst_streams: int = (
        0  # streams flagged burst-read: their stamps do not show arrival times (agg excluded)
    )
    note: str = ""
    server_window: dict[str, Any] | None = None  # the engine's /metrics over the group (see RequestRecord)
    # how many streams the engine actually ran at once (docs/measurement.md, "Drain and effective concurrency"): its
    # request steps per engine step over the group's window, else the streams' decode time over their span
    effective_concurrency: float | None = None
    concurrency_source: ConcurrencySource = ""
    concurrency_engine: float | None = None  # Δrequest_steps / Δengine_steps of the group's window
    concurrency_client: float | None = None  # Σ_i (t_last_i - t_first_i) / (max t_last - min t_first)

    def to_row(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GroupRecord:
        return _known_fields(cls, data)


@dataclass
class RunSummary:
    """Named measures of one run (see module docstring) and how they were obtained."""

    measures: dict[str, float | None] = field(default_factory=dict)
    n_ok: int = 0
    n_failed: int = 0
    method: dict[str, str] = field(default_factory=dict)  # measure -> how (token source, timer, window)
    ranges: dict[str, list[float]] = field(default_factory=dict)  # measure -> [min, max] over samples
    samples: dict[str, list[float]] = field(default_factory=dict)  # measure -> raw samples (n = len)
    counters: dict[str, float] = field(default_factory=dict)  # raw counter deltas (spec, prefix cache, io)
    notes: list[str] = field(default_factory=list)
    # what the engine's /metrics say about each window (docs/measurement.md, "Per-run evidence"): window name
    # ("decode", "prefill_<P>") -> running/waiting gauges at its start and end, finished vs sent, cache hits
    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    # findings that explain noise: [{"code": "foreign-traffic" | "counter-reset" | "busy-at-start" |
    # "not-drained" | "prefix-cache-hit" | "short-concurrency" | "failed-requests" | "looping-output", "window":
    # "decode" | "prefill_<P>" | "decode_c<K>" | ..., "message": one sentence with the numbers}]
    flags: list[dict[str, str]] = field(default_factory=list)
    # what the nodes' samplers saw (docs/measurement.md, "Node telemetry"): "period_ms", "nodes" ({node: {"gpu":
    # "nvidia-smi" | "not available: <reason>", "memory": ..., sample counts}}) and one entry per window
    # ("decode", "prefill_<P>": seconds, tokens, energy_j, joules_per_token, "nodes": {node: figures})
    telemetry: dict[str, Any] = field(default_factory=dict)
    # output sanity per measured window (docs/measurement.md, "Output sanity"): "decode_c1", "decode_c1_cold",
    # "decode_c<K>", "prefill_<P>" -> requests, failed, empty, truncated, looping; an invalid window also has
    # "invalid": true and "excluded": {measure: the value it would have had}
    sanity: dict[str, dict[str, Any]] = field(default_factory=dict)
    # per load level window ("load@load=4", "load@rate=0.5"; docs/measurement.md, "Serving under load"): loop,
    # level, requests answered and failed, span, each percentile's 95 % order-statistic interval, client-bound,
    # invalid and the SLO's verdict
    load: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSummary:
        return _known_fields(cls, data)


@dataclass
class BenchResult:
    """Everything one `run_bench` produced; `save`/`load` round-trip it through one JSON file."""

    records: list[RequestRecord]
    groups: list[GroupRecord]
    summary: RunSummary
    provenance: dict[str, Any]
    scrapes: dict[str, str] = field(
        default_factory=dict
    )  # "<phase>.<before|after>[.<i>]" -> raw /metrics text
    io: dict[str, dict[str, float]] = field(default_factory=dict)  # probe name -> counter deltas
    # node -> the raw telemetry samples as CSV text, for the run folder's telemetry/<node>.csv (columns:
    # labkit/measure/telemetry/series.py CSV_HEADER; docs/measurement.md, "Node telemetry"); empty without telemetry
    telemetry: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_VERSION,
            "provenance": self.provenance,
            "summary": self.summary.to_dict(),
            "records": [r.to_row() for r in self.records],
            "groups": [g.to_row() for g in self.groups],
            "io": self.io,
            "scrapes": self.scrapes,
            "telemetry": self.telemetry,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchResult:
        return cls(
            records=[RequestRecord.from_dict(r) for r in data.get("records", [])],
            groups=[GroupRecord.from_dict(g) for g in data.get("groups", [])],
            summary=RunSummary.from_dict(data.get("summary", {})),
            provenance=data.get("provenance", {}),
            scrapes=data.get("scrapes", {}),
            io=data.get("io", {}),
            telemetry=data.get("telemetry", {}),
        )

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
