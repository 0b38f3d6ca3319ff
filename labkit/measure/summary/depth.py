"""The context-depth measures of a run's summary: per depth D and cache state, TTFT, prefill of the new tokens,
decode, the prompt and its new tokens, the engine's prefix-cache hits beside the expected ones
(`depth_<D>_<x>`, `depth_<D>_<x>_cached`); how much the cache cut TTFT (`depth_<D>_ttft_gain`); how many cached
requests' hits agree with the expected (`depth_hit_agreement`). docs/measurement.md, "Context depth".

Pure: the records in, measures and notes written onto the RunSummary.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.summary.turns import hit_agreement, per_request_measures
from labkit.measures import CACHE_STATES, depth_key


def depth_measures(s: RunSummary, records: Sequence[RequestRecord], src: str) -> None:
    """Per depth and cache state, each per-request measure over the ok measured requests (medians over the
    repetitions and repeats); then the TTFT gain per depth and the hit agreement over the cached requests."""
    measured = [r for r in records if r.phase == "depth" and r.cache_state in CACHE_STATES]
    ok = [r for r in measured if r.ok and r.depth is not None]
    for depth in sorted({r.depth for r in ok if r.depth is not None}):
        for state in CACHE_STATES:
            rows = [r for r in ok if r.depth == depth and r.cache_state == state]
            per_request_measures(
                s,
                rows,
                partial(depth_key, depth=depth, state=state),
                f"the {state} requests at depth {depth}",
                src,
                "the load request's prompt in whole blocks",
            )
        _gain(s, depth)
    _agreement(s, [r for r in measured if r.cache_state == "cached"])


def _gain(s: RunSummary, depth: int) -> None:
    """depth_<D>_ttft_gain: uncached TTFT over cached TTFT (above 1: the cached context answered sooner)."""
    uncached, cached = (s.measures.get(depth_key("ttft", depth, c)) for c in CACHE_STATES)
    if uncached and cached:
        key = depth_key("ttft_gain", depth)
        s.measures[key] = uncached / cached
        s.method[key] = (
            f"{depth_key('ttft', depth, 'uncached')} / {depth_key('ttft', depth, 'cached')}: above 1, the "
            "context sent before answered sooner"
        )


def _agreement(s: RunSummary, cached: Sequence[RequestRecord]) -> None:
    """depth_hit_agreement: the share of cached requests whose engine hits lie within the expected; the ones
    that do not are noted."""
    checked, off = 0, []
    for r in cached:
        if r.hit_expected is None or r.hit_engine is None:
            continue
        checked += 1
        most = r.hit_expected_max if r.hit_expected_max is not None else r.hit_expected
        if not r.hit_expected <= r.hit_engine <= most:
            off.append(
                f"depth {r.depth} (repetition {r.rep + 1}): {r.hit_engine:g} hit tokens, expected "
                f"{r.hit_expected}-{most}"
            )
    hit_agreement(
        s, "depth", checked, off, "cached depth requests", "the load request's prompt in whole blocks"
    )
