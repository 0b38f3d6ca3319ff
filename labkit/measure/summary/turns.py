"""The agentic and idle measures of a run's summary: per session turn T, TTFT, prefill of the new tokens, the
prompt and its new tokens, the engine's prefix-cache hits beside the expected ones, and decode
(`agentic_<x>_t<T>`); how many turns' hits agree with the expected; per idle length S, the idle turn's TTFT,
decode and its slowdown against the warm decode c1 (`idle_<S>_<x>`). docs/measurement.md, "Agentic sessions"
and "Idle turns".

Pure: the records in, measures and notes written onto the RunSummary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.request.recording import BURST_FLAG
from labkit.measure.summary.speed import DECODE_WINDOW, put
from labkit.measures import idle_key, turn_key
from labkit.recipe import MeasurePlan


def new_tokens(r: RequestRecord) -> float | None:
    """The turn's uncached prompt tokens: its prompt less the engine's hits (else the least expected)."""
    cached = r.hit_engine if r.hit_engine is not None else r.hit_expected
    return None if r.prompt_tokens is None or cached is None else r.prompt_tokens - cached


# the figures of one request of a session turn or a depth: measure -> (its value on one record, its method with
# {where} the requests, {src} the token source, {least} what the least expected hits are); depth.py too
PER_REQUEST: dict[str, tuple[Callable[[RequestRecord], float | None], str]] = {
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
        "median of the least expected hit tokens ({least}) over {where}",
    ),
    "decode": (
        lambda r: None if BURST_FLAG in r.flags else r.decode_tps,
        "median over {where}; " + DECODE_WINDOW + "; tokens: {src}",
    ),
    # the engine's own figure beside it where the lane asked for per-request metrics: after a long prompt the
    # client's first token lags the engine's by a fixed few ms, which short answers read as a decode offset
    "decode_engine": (
        lambda r: r.engine_decode_tps,
        "median over {where} of (N - 1) / generation_time_ms of the response's metrics (the engine's first to "
        "last token)",
    ),
}


def per_request_measures(
    s: RunSummary,
    rows: Sequence[RequestRecord],
    key_of: Callable[[str], str],
    where: str,
    src: str,
    least: str,
) -> None:
    """Every PER_REQUEST measure over `rows`, under the key `key_of(measure)`."""
    for measure, (value, how) in PER_REQUEST.items():
        put(s, key_of(measure), [value(r) for r in rows], how.format(where=where, src=src, least=least))


def turn_measures(s: RunSummary, records: Sequence[RequestRecord], plan: MeasurePlan, src: str) -> None:
    """The per-turn measures over the ok agentic records (each a median over sessions and repetitions), and
    the hit agreement over every turn after the first."""
    ok = [r for r in records if r.ok and r.phase == "agentic"]
    for turn in sorted({r.turn for r in ok}):
        rows = [r for r in ok if r.turn == turn]
        per_request_measures(
            s,
            rows,
            partial(turn_key, turn=turn),
            f"the sessions' turn {turn}",
            src,
            "the previous prompt in whole blocks",
        )
    _agreement(s, [r for r in records if r.phase == "agentic"], plan)


def _agreement(s: RunSummary, recs: Sequence[RequestRecord], plan: MeasurePlan) -> None:
    """agentic_hit_agreement: the share of checked turn windows whose engine hits lie within the expected
    (least to most, summed over the window's sessions); the windows that do not are noted."""
    sessions = plan.agentic.sessions if plan.agentic else 1
    windows: dict[tuple[int, int, int], list[RequestRecord]] = {}
    for r in recs:
        if r.hit_expected is not None and r.session is not None:
            windows.setdefault((r.rep, r.turn, r.session // sessions), []).append(r)
    checked, off = 0, []
    for (rep, turn, _), rows in sorted(windows.items()):
        got = _window_hits(rows)
        if got is None:
            continue
        least = sum(r.hit_expected or 0 for r in rows)
        most = sum(r.hit_expected_max or 0 for r in rows)
        checked += 1
        if not least <= got <= most:
            off.append(f"turn {turn} (repetition {rep + 1}): {got:g} hit tokens, expected {least}-{most}")
    hit_agreement(
        s,
        "agentic",
        checked,
        off,
        "session turns (after the first)",
        "from the previous prompt in whole blocks to the previous prompt and answer in whole blocks",
    )


def hit_agreement(
    s: RunSummary, kind: str, checked: int, off: Sequence[str], what: str, expected: str
) -> None:
    """`<kind>_hit_agreement`: the share of the `checked` requests (or windows) whose engine hits were within the
    expected; the `off` ones are noted (the first six). Nothing when none could be checked."""
    if not checked:
        return
    key = f"{kind}_hit_agreement"
    s.measures[key] = (checked - len(off)) / checked
    s.method[key] = (
        f"{checked - len(off)} of {checked} {what} had engine hit tokens within the expected: {expected}"
    )
    if off:
        s.notes.append(f"{kind}: prefix-cache hits unlike the expected: " + "; ".join(off[:6]))


def _window_hits(rows: Sequence[RequestRecord]) -> float | None:
    """The engine's hits over one turn window: the responses' own counts when every one has them, else the
    window's counter delta."""
    if all(r.hit_engine is not None for r in rows):
        return sum(r.hit_engine or 0.0 for r in rows)
    return rows[0].hit_window


def idle_measures(s: RunSummary, records: Sequence[RequestRecord], src: str) -> None:
    """Per idle length: the idle turns' TTFT and decode (medians over the repetitions), and decode c1 over the
    idle decode (above 1: the idle turn decoded slower than the warm turns)."""
    ok = [r for r in records if r.ok and r.phase == "idle" and r.idle_s is not None]
    for seconds in sorted({r.idle_s for r in ok if r.idle_s is not None}):
        rows = [r for r in ok if r.idle_s == seconds]
        where = f"the idle turn(s) after {seconds:g} s of idle engine"
        put(s, idle_key("ttft", seconds), [r.ttft_s for r in rows], f"median t_first - t_send of {where}, s")
        clean = [r.decode_tps for r in rows if BURST_FLAG not in r.flags]
        put(s, idle_key("decode", seconds), clean, f"median over {where}; {DECODE_WINDOW}; tokens: {src}")
        warm, idle = s.measures.get("decode_c1"), s.measures.get(idle_key("decode", seconds))
        if warm and idle:
            key = idle_key("slowdown", seconds)
            s.measures[key] = warm / idle
            s.method[key] = (
                f"decode_c1 / {idle_key('decode', seconds)}: above 1, {where} decoded slower than warm"
            )
