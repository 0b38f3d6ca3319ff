"""The context-depth measures of a run's summary: per depth D and cache state, TTFT, prefill of the new tokens,
decode, the prompt and its new tokens, the engine's prefix-cache hits beside the expected ones
(`depth_<D>_<x>`, `depth_<D>_<x>_cached`); how much the cache cut TTFT (`depth_<D>_ttft_gain`); how many cached
requests' hits agree with the expected (`depth_hit_agreement`). docs/measurement.md, "Context depth".

Pure: the records in, measures and notes written onto the RunSummary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from labkit.measure.recording import BURST_FLAG
from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.summary_speed import DECODE_WINDOW, put
from labkit.measure.summary_turns import new_tokens
from labkit.measures import DEPTH_STATES, depth_key

CACHE_STATES = tuple(DEPTH_STATES)  # uncached, cached

# measure -> (its value on one record, how it is worded: {where} is the depth and state, {src} the token source)
_PER_REQUEST: dict[str, tuple[Callable[[RequestRecord], float | None], str]] = {
    "ttft": (lambda r: r.ttft_s, "median t_first - t_send over {where}, s"),
    "prefill": (
        lambda r: r.prefill_tps,
        "median (P - hit tokens) / (TTFT - RTT) over {where}; hits: the engine's, else the least expected",
    ),
    "prompt_tokens": (lambda r: r.prompt_tokens, "median usage.prompt_tokens over {where}"),
    "new_tokens": (new_tokens, "median P - hit tokens over {where}"),
    "hit": (
        lambda r: r.hit_engine,
        "median of the engine's hit tokens (usage cached_tokens, else Δprefix_cache_hits) over {where}",
    ),
    "hit_expected": (
        lambda r: r.hit_expected,
        "median of the least expected hit tokens (the load request's prompt in whole blocks) over {where}",
    ),
    "decode": (
        lambda r: None if BURST_FLAG in r.flags else r.decode_tps,
        "median over {where}; " + DECODE_WINDOW + "; tokens: {src}",
    ),
}


def depth_measures(s: RunSummary, records: Sequence[RequestRecord], src: str) -> None:
    """Per depth and cache state, each per-request measure over the ok measured requests (medians over the
    repetitions and repeats); then the TTFT gain per depth and the hit agreement over the cached requests."""
    measured = [r for r in records if r.phase == "depth" and r.cache_state in CACHE_STATES]
    ok = [r for r in measured if r.ok and r.depth is not None]
    for depth in sorted({r.depth for r in ok if r.depth is not None}):
        for state in CACHE_STATES:
            rows = [r for r in ok if r.depth == depth and r.cache_state == state]
            where = f"the {state} requests at depth {depth}"
            for measure, (value, how) in _PER_REQUEST.items():
                put(
                    s,
                    depth_key(measure, depth, state),
                    [value(r) for r in rows],
                    how.format(where=where, src=src),
                )
        _gain(s, depth)
    _agreement(s, [r for r in measured if r.cache_state == "cached"])


def _gain(s: RunSummary, depth: int) -> None:
    """depth_<D>_ttft_gain: uncached TTFT over cached TTFT (above 1: the cached context answered sooner)."""
    uncached, cached = (s.measures.get(depth_key("ttft", depth, c)) for c in CACHE_STATES)
    if uncached and cached:
        key = f"depth_{depth}_ttft_gain"
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
    if not checked:
        return
    s.measures["depth_hit_agreement"] = (checked - len(off)) / checked
    s.method["depth_hit_agreement"] = (
        f"{checked - len(off)} of {checked} cached depth requests had engine hit tokens within the expected: "
        "the load request's prompt in whole blocks"
    )
    if off:
        s.notes.append("depth: prefix-cache hits unlike the expected: " + "; ".join(off[:6]))
