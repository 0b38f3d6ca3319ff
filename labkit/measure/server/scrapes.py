"""The runner's counter-derived numbers: /metrics scraped before and after a window, turned into its deltas.

Speculative acceptance of the decode window (counter deltas, or SGLang's /server_info after a cache flush when
it exports no spec counters), pooled over repeated runs; prefix-cache hits of each prefill sample; whether the
engine served requests before the run (then the first one is not cold). The formulas are in metrics.py.

`EvidenceLog` keeps each window's evidence (docs/measurement.md, "Per-run evidence"): the phases hand it every
pair of consecutive scrapes around labkit's requests, all taken while labkit had nothing in flight, with the
number of requests sent between them. Per window it keeps the running/waiting gauges at the first and last
scrape, requests finished against requests sent, prefix-cache hits, every watched counter that went
backwards, and the drain check's waits (labkit/measure/server/drain.py). A metric the engine does not export stays
absent, never 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from labkit.measure.records import RequestRecord
from labkit.measure.request.client import EndpointError, StreamClient
from labkit.measure.request.recording import CACHE_HIT_TOLERANCE
from labkit.measure.server import metrics as mx

# requests an engine finished since boot: any > 0 means the first request of this run is not a cold one
SERVED_COUNTERS = (
    "vllm:request_success_total",
    "vllm:request_success",
    "sglang:e2e_request_latency_seconds_count",
)


# a record whose window saw a counter go backwards (the engine restarted): kept, left out of the summary
COUNTER_RESET = "counter-reset"


def served_before(before: mx.Samples) -> float | None:
    """Requests the engine finished before this scrape (None when it exports no such counter)."""
    return mx.total(before, *SERVED_COUNTERS)


async def flush_for_acceptance(client: StreamClient, before: mx.Samples | None, notes: list[str]) -> bool:
    """SGLang without spec counters: reset the cumulative acceptance (POST /flush_cache, idle) so
    /server_info reads this window only. True when the reset succeeded."""
    if before is not None and (
        mx.total(before, *mx.V_DRAFTS) is not None or mx.total(before, *mx.S_VERIFY) is not None
    ):
        return False
    try:
        status, text = await client.get("/server_info")
        info = json.loads(text) if status == 200 else {}
    except (EndpointError, ValueError):
        return False
    if not isinstance(info, dict) or not info.get("speculative_algorithm"):
        return False
    status, _ = await client.post_json("/flush_cache", {})
    if status != 200:
        notes.append(f"POST /flush_cache answered HTTP {status}: no per-run acceptance from /server_info")
        return False
    return True


async def window_acceptance(
    client: StreamClient,
    before: mx.Samples | None,
    after: mx.Samples | None,
    *,
    spec_k: int | None,
    spec_k_source: str = "",
    n_window: int,
    flushed: bool,
    notes: list[str],
    stream: tuple[int, int] = (0, 0),
) -> mx.Acceptance | None:
    """Acceptance of the decode window: counter deltas between the scrapes, else (after a successful flush)
    /server_info's. `n_window`: requests answered inside the window (SGLang's deltas include their
    prefill). `stream`: (tokens, token-bearing chunks) of the window's streams with per-chunk counts, τ as
    the client saw it, and τ itself when the engine exports no per-step counts."""
    acc = None
    if before is not None and after is not None:
        try:
            sglang = mx.total(after, *mx.S_VERIFY) is not None
            acc = mx.spec_acceptance(
                before, after, spec_k, n_requests=n_window if sglang else None, k_source=spec_k_source
            )
        except mx.CounterReset as e:
            notes.append(f"acceptance invalid: {e}")
    if acc is None and flushed:
        try:
            status, text = await client.get("/server_info")
            acc = mx.server_info_acceptance(json.loads(text)) if status == 200 else None
        except (EndpointError, ValueError):
            acc = None
    if acc is not None and stream[1]:
        acc.stream_tokens, acc.stream_chunks = float(stream[0]), float(stream[1])
        if acc.steps is None:
            acc.tokens, acc.steps = acc.stream_tokens, acc.stream_chunks
            acc.tau_method = mx.STREAM_TAU + " (the engine exports no per-step counts)"
    return acc


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def pool_acceptance(pooled: mx.Acceptance | None, acc: mx.Acceptance) -> mx.Acceptance:
    """Several runs: pool the counter deltas (never average per-run ratios). Updates `pooled` in place."""
    if pooled is None:
        return acc
    a = pooled
    a.accepted += acc.accepted
    a.per_pos = [
        (p * a.drafts + q * acc.drafts) / (a.drafts + acc.drafts)
        for p, q in zip(a.per_pos, acc.per_pos, strict=False)
    ]
    a.drafts += acc.drafts
    a.draft_tokens = (a.draft_tokens or 0) + (acc.draft_tokens or 0) or None
    for name in ("tokens", "steps", "decode_steps", "stream_tokens", "stream_chunks"):
        setattr(a, name, _add(getattr(a, name), getattr(acc, name)))
    if acc.tau_method != a.tau_method:
        a.tokens = a.steps = None  # runs counted τ differently: no pooled figure
    return a


def server_view(
    recs: list[RequestRecord], before: mx.Samples | None, after: mx.Samples | None
) -> dict[str, float] | None:
    """The engine's own counters over one window of requests (a c1 turn, a cK group, a prefill sample), kept
    on each of its records: `server_window`, and `server_ttft_s` (the window's mean when it held several
    requests). None when a scrape is missing, the engine has no such counters, or it restarted."""
    if before is None or after is None:
        return None
    try:
        view = mx.server_window(before, after)
    except mx.CounterReset:
        return None
    if view is None:
        return None
    for rec in recs:
        rec.server_window = dict(view)
        rec.server_ttft_s = view.get("ttft_s")
    return view


def prefix_cache_sample(
    rec: RequestRecord, before: mx.Samples | None, after: mx.Samples | None
) -> tuple[float, float] | None:
    """(hits, queries) prefix-cache deltas around one prefill sample; flags `rec` on a hit or a counter
    reset."""
    if before is None or after is None:
        return None
    try:
        pc = mx.prefix_cache(before, after)
    except mx.CounterReset as e:
        rec.flags = "; ".join(filter(None, [rec.flags, f"{COUNTER_RESET} ({e})"]))
        return None
    if pc is not None:
        hits, _ = pc
        if hits > CACHE_HIT_TOLERANCE and "prefix-cache-hit" not in rec.flags:
            rec.flags = "; ".join(filter(None, [rec.flags, f"prefix-cache-hit ({hits:g} hit tokens)"]))
    return pc


# (name in the engine's /metrics, whether the engine sets it at the scrape (live) or when it logs a batch)
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
# vLLM updates its gauges every engine step; SGLang only when it logs a prefill or decode batch, so an idle
# SGLang keeps showing its last batch: only vLLM's gauges can say someone else is on the engine.
LIVE_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")

# counters whose decrease means the engine restarted (each a name group, summed over labels)
WATCHED = (
    SERVED_COUNTERS,
    mx.V_GEN,
    mx.S_GEN,
    mx.V_PC_QUERIES,
    mx.V_PC_HITS,
    mx.S_PROMPT,
    mx.S_CACHED,
    mx.V_TTFT_COUNT,
    mx.V_ITL_COUNT,
    mx.V_DRAFTS,
    mx.V_ACCEPTED,
    mx.S_VERIFY,
)


def gauges(samples: mx.Samples | None) -> dict[str, float]:
    """{"running": n, "waiting": n} from one scrape; a gauge the engine does not export is left out."""
    out: dict[str, float] = {}
    if samples is None:
        return out
    for key, names in (("running", RUNNING), ("waiting", WAITING)):
        value = mx.total(samples, *names)
        if value is not None:
            out[key] = value
    return out


def live_gauges(samples: mx.Samples) -> bool:
    """True when the gauges describe the engine at the moment of the scrape (vLLM), not its last batch."""
    return any(name in samples for name in LIVE_GAUGES)


def busy(samples: mx.Samples | None) -> bool:
    """The engine's live gauges show a request running or waiting (False for gauges that are not live)."""
    if samples is None or not live_gauges(samples):
        return False
    g = gauges(samples)
    return bool(g.get("running") or g.get("waiting"))


def counter_resets(before: mx.Samples, after: mx.Samples) -> list[tuple[str, float, float]]:
    """(counter, before, after) of every watched counter that went backwards between the two scrapes."""
    out = []
    for names in WATCHED:
        b, a = mx.total(before, *names), mx.total(after, *names)
        if b is not None and a is not None and a < b:
            name = next(n for n in names if n in after)
            out.append((name, b, a))
    return out


@dataclass
class WindowEvidence:
    """One window of one repetition, as the scrape pairs fed to it describe it (docs/measurement.md,
    "Per-run evidence")."""

    name: str
    rep: int
    sent: int = 0  # labkit's requests in the window
    sent_valid: int = 0  # ... in the pairs whose counters are valid (no reset) and exported
    finished: float | None = None  # the engine's finished requests over those pairs
    finished_by: str = ""  # the counter they were read from
    hits: float | None = None  # prefix-cache hit tokens over the valid pairs
    queries: float | None = None
    hit_pairs: int = 0  # pairs with more than the tolerance of hit tokens per request
    pairs: int = 0
    start: dict[str, float] = field(default_factory=dict)
    end: dict[str, float] = field(default_factory=dict)
    live: bool = False  # the engine's gauges are set at the scrape (vLLM)
    scrapes: int = 0  # scrapes seen (all taken while labkit had nothing in flight)
    busy: int = 0  # ... of them with running or waiting > 0
    resets: list[tuple[str, float, float]] = field(default_factory=list)
    last: object = None  # the last scrape seen (consecutive pairs share one)
    # the drain check (labkit/measure/server/drain.py): boundaries between labkit's requests at which the live gauges
    # were not zero, so labkit waited; those still busy after the wait, as (where, running, waiting, waited s)
    drain_waits: int = 0
    drain_wait_s: float = 0.0
    start_drained: bool = False  # the window's first scrape was busy, and the wait saw the engine drain
    undrained: list[tuple[str, float, float, float]] = field(default_factory=list)

    def see(self, samples: mx.Samples) -> None:
        """One scrape's gauges (a scrape shared by two consecutive pairs counts once)."""
        if samples is self.last:
            return
        g = gauges(samples)
        if self.scrapes == 0:
            self.start, self.live = g, live_gauges(samples)
        self.scrapes += 1
        self.busy += bool(g.get("running") or g.get("waiting"))
        self.end, self.last = g, samples

    def pair(self, before: mx.Samples, after: mx.Samples, sent: int) -> list[tuple[str, float, float]]:
        """One pair's counters; a pair with a counter that went backwards adds its resets and nothing else."""
        self.pairs += 1
        resets = counter_resets(before, after)
        if resets:
            self.resets += resets
            return resets
        done = mx.total(after, *SERVED_COUNTERS)
        if done is not None:
            self.finished_by = next(n for n in SERVED_COUNTERS if n in after)
            self.finished = (self.finished or 0.0) + done - (mx.total(before, *SERVED_COUNTERS) or 0.0)
            self.sent_valid += sent
        pc = mx.prefix_cache(before, after)
        if pc is not None:
            self.hits, self.queries = (self.hits or 0.0) + pc[0], (self.queries or 0.0) + pc[1]
            self.hit_pairs += pc[0] > CACHE_HIT_TOLERANCE * max(sent, 1)
        return []


class EvidenceLog:
    """The evidence of every window of one run, fed by the phases; summary/evidence.py pools it and words its flags."""

    def __init__(self) -> None:
        self.windows: list[WindowEvidence] = []

    def _window(self, name: str, rep: int) -> WindowEvidence:
        for w in self.windows:
            if w.name == name and w.rep == rep:
                return w
        self.windows.append(WindowEvidence(name, rep))
        return self.windows[-1]

    def pair(
        self, window: str, rep: int, before: mx.Samples | None, after: mx.Samples | None, sent: int
    ) -> str | None:
        """Two consecutive scrapes of `window` with `sent` labkit requests between them. Returns a message
        when a watched counter went backwards between them (the pair's counters are then not used)."""
        w = self._window(window, rep)
        w.sent += sent
        for samples in (before, after):
            if samples is not None:
                w.see(samples)
        if before is None or after is None:
            return None
        resets = w.pair(before, after, sent)
        return reset_message(resets) if resets else None

    def see(self, window: str, rep: int, samples: mx.Samples) -> None:
        """A scrape of `window` that opens no pair: one taken while labkit waited for the engine to drain
        before the window's first request (what finished then ran before any of labkit's requests)."""
        self._window(window, rep).see(samples)

    def drained(self, window: str, rep: int, where: str, waited: float, after: mx.Samples) -> None:
        """A boundary at which the live gauges were not zero and labkit waited `waited` seconds; `after` is
        the last scrape of the wait (busy still: the bound expired)."""
        w = self._window(window, rep)
        w.drain_waits += 1
        w.drain_wait_s += waited
        g = gauges(after)
        if g.get("running") or g.get("waiting"):
            w.undrained.append((where, g.get("running", 0.0), g.get("waiting", 0.0), waited))
        elif where == "start":
            w.start_drained = True

    def reset_in(self, window: str, rep: int) -> str | None:
        """The counter-reset message of a window, None when its counters never went backwards."""
        w = self._window(window, rep)
        return reset_message(w.resets) if w.resets else None


def reset_message(resets: list[tuple[str, float, float]]) -> str:
    """Which counter went backwards, from what to what (the first of them)."""
    name, b, a = resets[0]
    more = f" (and {len(resets) - 1} more counter(s))" if len(resets) > 1 else ""
    return f"counter {name} went backwards from {b:g} to {a:g}{more}: the engine restarted inside the window"
