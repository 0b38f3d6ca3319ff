"""Prefill under decode, the summary: per arriving prompt length P, the arrivals' TTFT and what their prefill
cost the streams that were decoding beside them (`interference_<P>_<m>`; docs/measurement.md, "Prefill under
decode").

Pure: chunk stamps in, figures out. The same functions read the simulator's write times in the tests, so the
client's figures are checked against the engine's truth by one definition.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.summary.latency import percentile
from labkit.measures import measure_key

NS = 1e9


@dataclass(frozen=True)
class Prefill:
    """An arriving prompt's prefill as the client saw it: sent at `t_send`, first token at `t_first` (ns)."""

    t_send: int
    t_first: int

    def overlaps(self, start: int, end: int) -> bool:
        """Whether a gap (start, end] between two of a stream's chunks overlaps this prefill."""
        return end > self.t_send and start < self.t_first


@dataclass(frozen=True)
class Effect:
    """What one prefill cost the running streams. `stall_s`: over the streams, the sum of each gap's excess
    over that stream's median gap before the arrival (a shorter gap counts 0), for the gaps that overlap the
    prefill; `gap_max_s`: the longest of those gaps; `gap_before_s` and `gap_after_s`: the median of the streams'
    median gaps before the arrival and after its first token (up to the next arrival's send). `covered`: every stream was still decoding when the arrival's first token came (else the figures
    leave out what came after that stream ended)."""

    stall_s: float
    gap_max_s: float | None
    gap_before_s: float | None
    covered: bool
    gap_after_s: float | None = None


def gaps(stamps: Sequence[int]) -> list[tuple[int, int]]:
    """A stream's gaps between consecutive token-bearing chunks, (start, end) in ns; the first gap (from the
    first token to the second) is left out, as the other streams' prefills may still run in it."""
    pairs = list(zip(stamps[:-1], stamps[1:], strict=True))
    return pairs[1:]


def effect(
    prefill: Prefill, earlier: Sequence[Prefill], streams: Sequence[Sequence[int]], until: int | None = None
) -> Effect:
    """The prefill's effect on streams given by their chunk stamps: each stream's baseline is the median of its
    gaps that ended before the arrival was sent and overlap no earlier arrival's prefill; its gaps after are
    those that start once the arrival had its first token and end by `until` (the next arrival's send)."""
    stall, longest, befores, afters, covered = 0.0, 0.0, [], [], True
    for stamps in streams:
        own = gaps(stamps)
        clean = [e - b for b, e in own if e <= prefill.t_send and not any(p.overlaps(b, e) for p in earlier)]
        during = [e - b for b, e in own if prefill.overlaps(b, e)]
        after = [e - b for b, e in own if b >= prefill.t_first and (until is None or e <= until)]
        if not stamps or stamps[-1] < prefill.t_first:
            covered = False
        if after:
            afters.append(statistics.median(after) / NS)
        if not clean:
            continue
        base = statistics.median(clean)
        befores.append(base / NS)
        stall += sum(max(0.0, d - base) for d in during) / NS
        longest = max([longest, *during])
    return Effect(
        stall,
        longest / NS if longest else None,
        statistics.median(befores) if befores else None,
        covered and bool(befores),
        statistics.median(afters) if afters else None,
    )


# the per-arrival figures written as medians over the arrivals: (measure, its value in an Effect, what it is)
EFFECTS: tuple[tuple[str, Callable[[Effect], float | None], str], ...] = (
    ("stall", lambda e: e.stall_s, "the streams' summed excess gap"),
    ("gap_max", lambda e: e.gap_max_s, "the longest overlapping gap"),
    ("gap_after", lambda e: e.gap_after_s, "the streams' median gap after the first token"),
    ("gap_before", lambda e: e.gap_before_s, "the streams' median gap before"),
)


def interference_measures(s: RunSummary, records: Sequence[RequestRecord]) -> None:
    """Per arriving prompt length, over every repetition: the arrivals' TTFT (median and max), the stall, the
    longest gap and the gap before (medians over the arrivals a stream decoded through), and the p99 of every
    gap of the streams from the window's first arrival on."""
    mine = [r for r in records if r.phase == "interference" and r.arriving_tokens is not None]
    for tokens in sorted({r.arriving_tokens for r in mine if r.arriving_tokens is not None}):
        ttfts: list[float] = []
        effects: list[Effect] = []
        after: list[float] = []
        for rep in sorted({r.rep for r in mine if r.arriving_tokens == tokens}):
            window = [r for r in mine if r.arriving_tokens == tokens and r.rep == rep]
            _window(s, tokens, rep, window, ttfts, effects, after)
        _write(s, tokens, ttfts, effects, after)


def _window(
    s: RunSummary,
    tokens: int,
    rep: int,
    window: Sequence[RequestRecord],
    ttfts: list[float],
    effects: list[Effect],
    after: list[float],
) -> None:
    """One window's arrivals and streams into the pooled lists; an arrival that came before the previous one
    had its first token, or after a stream ended, is noted."""
    streams = [r.chunk_t for r in window if r.interference == "stream" and r.ok]
    arrivals = sorted(
        (r for r in window if r.interference == "arrival" and r.ok and r.t_first is not None),
        key=lambda r: r.t_send,
    )
    done: list[Prefill] = []
    where = f"interference {tokens:,} (repetition {rep + 1})"
    sends = [r.t_send for r in arrivals][1:] + [None]
    for r, until in zip(arrivals, sends, strict=True):
        assert r.t_first is not None and r.ttft_s is not None
        p = Prefill(r.t_send, r.t_first)
        if done and done[-1].t_first > p.t_send:
            s.notes.append(
                f"{where}: arrival {r.turn + 1} came before the previous one's first token: raise spacing_s"
            )
        e = effect(p, done, streams, until)
        if not e.covered:
            s.notes.append(
                f"{where}: arrival {r.turn + 1} was not decoded through by every stream: raise stream_tokens"
            )
        else:
            effects.append(e)
        ttfts.append(r.ttft_s)
        done.append(p)
    if done:
        start = done[0].t_send
        after.extend((e - b) / NS for stamps in streams for b, e in gaps(stamps) if e > start)


def _write(s: RunSummary, tokens: int, ttfts: list[float], effects: list[Effect], after: list[float]) -> None:
    def put(measure: str, value: float | None, how: str) -> None:
        if value is not None:
            key = measure_key(f"interference_<P>_{measure}", prompt=tokens)
            s.measures[key] = value
            s.method[key] = how

    what = f"the {tokens:,}-token arrivals"
    if ttfts:
        put("ttft", statistics.median(ttfts), f"median client TTFT (first token - send) of {what}")
        put("ttft_max", max(ttfts), f"the longest client TTFT of {what}")
    stamps = "client chunk stamps of the running streams"
    for measure, pick, how in EFFECTS:
        known = [v for e in effects if (v := pick(e)) is not None]
        if known:
            put(measure, statistics.median(known), f"median over {what}: {how} ({stamps})")
    put(
        "itl_p99",
        percentile(after, 99.0),
        "p99 of the running streams' gaps from each window's first arrival on",
    )
