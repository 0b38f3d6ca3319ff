"""Output sanity: what each measured window's responses were, counted (empty, truncated, failed, looping), and a
window with failures made invalid for its measures (docs/measurement.md, "Output sanity").

A window here is the requests one figure is made of: `decode_c1` (the warm c1 turns), `decode_c1_cold` (the
cold turn), `decode_c<K>` (the cK groups) and `prefill_<P>` (the samples of one length); warmups belong to none.
A looping response is one whose text ends in an exact repetition covering at least half of it (`exact_loop`).
Random-weight test models loop by nature (their recipes say `model.loops = true`): then loops are counted and
said, but neither flag nor invalidate anything.

Pure: records in, `summary.sanity`, flags and notes out; the measures of an invalid window move out of
`summary.measures` into its `excluded` entry, so nothing measured is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from labkit.measure.records import RequestRecord, RunSummary
from labkit.measures import window_covers

LOOP_SHARE = 0.5  # the repeated tail covers at least this share of the text ...
LOOP_REPEATS = 3  # ... holds its unit at least this many times ...
LOOP_MIN_CHARS = 64  # ... and is at least this long (a short answer proves nothing)
KINDS = ("failed", "empty", "truncated", "looping")


def z_function(s: str) -> list[int]:
    """z[i]: the length of the longest common prefix of s and s[i:] (z[0] = len(s)); linear time."""
    n = len(s)
    z = [0] * n
    if n:
        z[0] = n
    left = right = 0
    for i in range(1, n):
        if i < right:
            z[i] = min(right - i, z[i - left])
        while i + z[i] < n and s[z[i]] == s[i + z[i]]:
            z[i] += 1
        if i + z[i] > right:
            left, right = i, i + z[i]
    return z


def exact_loop(text: str) -> tuple[int, float] | None:
    """(period, share) when the text ends in an exact repetition: its last L characters repeat a unit of p
    characters (each character equals the one p before it), L ≥ LOOP_REPEATS·p, L ≥ LOOP_MIN_CHARS and
    L ≥ LOOP_SHARE of the text; the smallest such p, with L / len(text). None otherwise.

    On the reversed text, z[p] + p is exactly how far back from the end period p holds."""
    n = len(text)
    if n < LOOP_MIN_CHARS:
        return None
    z = z_function(text[::-1])
    need = max(LOOP_MIN_CHARS, LOOP_SHARE * n)
    for p in range(1, n // LOOP_REPEATS + 1):
        run = p + z[p]
        if run >= need and run >= LOOP_REPEATS * p:
            return p, run / n
    return None


def mark_loop(rec: RequestRecord, text: str) -> None:
    """Set the record's loop fields from its response text."""
    found = exact_loop(text)
    if found is not None:
        rec.loop_period, rec.loop_share = found


def kinds(rec: RequestRecord) -> set[str]:
    """What was wrong with one response: failed (any validity rule), empty (no token at all), truncated (tokens,
    but it ended before the requested length), looping (an exact repetition at its end)."""
    out = set()
    if not rec.ok:
        out.add("failed")
        if rec.chunks == 0:
            out.add("empty")
        elif (rec.output_tokens or 0) < rec.requested_tokens or rec.finish_reason is None:
            out.add("truncated")
    if rec.loop_period is not None:
        out.add("looping")
    return out


def apply_sanity(
    s: RunSummary,
    records: Sequence[RequestRecord],
    window_of: Callable[[RequestRecord], str | None],
    loops_expected: bool = False,
    tolerated: Callable[[str], float] = lambda window: 0.0,
) -> None:
    """Count every window's responses into `s.sanity`; a window with failures (more than the share
    `tolerated(window)` allows: a load level's measure.load.max_error_share) or loops (unless the model loops
    by nature) is invalid: a flag, a note, and its measures moved out of `s.measures`. `window_of` names a
    record's window (the workload registry's: labkit/measure/workloads/__init__.py)."""
    windows: dict[str, list[RequestRecord]] = {}
    for rec in records:
        w = window_of(rec)
        if w is not None:
            windows.setdefault(w, []).append(rec)
    for name, recs in windows.items():
        found = [kinds(r) for r in recs]
        entry: dict[str, Any] = {"requests": len(recs), **{k: sum(k in f for f in found) for k in KINDS}}
        gating = ["failed"] + ([] if loops_expected else ["looping"])
        if loops_expected:
            entry["loops_expected"] = True
        why = [k for k in gating if entry[k] and (k != "failed" or entry[k] > tolerated(name) * len(recs))]
        if why:
            entry["invalid"] = True
            entry["excluded"] = _exclude(s, name)
            for code in why:
                s.flags.append(_flag(name, code, entry, recs))
            s.notes.append(_invalid_note(name, entry))
        elif entry["looping"]:
            s.notes.append(
                f"{name}: {entry['looping']} of {entry['requests']} responses end in an exact repetition; the "
                "model loops by nature (model.loops), so this is reported, not gating"
            )
        s.sanity[name] = entry


def _exclude(s: RunSummary, window: str) -> dict[str, float | None]:
    """Move the window's measures out of the summary; their values as they would have been."""
    out = {}
    for key in [k for k in s.measures if window_covers(window, k)]:
        out[key] = s.measures.pop(key)
        s.samples.pop(key, None)
        s.ranges.pop(key, None)
        s.method[key] = (
            f"invalid: {window} had failed or looping responses (summary.sanity); " + s.method.get(key, "")
        )
    return out


def _flag(window: str, code: str, entry: dict[str, Any], recs: Sequence[RequestRecord]) -> dict[str, str]:
    n = entry["requests"]
    if code == "failed":
        errors = "; ".join(sorted({r.error for r in recs if not r.ok}))[:200]
        message = (
            f"{window}: {entry['failed']} of {n} requests failed ({entry['empty']} empty, "
            f"{entry['truncated']} truncated): {errors}; the window's figures are left out"
        )
        return {"code": "failed-requests", "window": window, "message": message}
    periods = sorted({r.loop_period for r in recs if r.loop_period is not None})
    message = (
        f"{window}: {entry['looping']} of {n} responses end in an exact repetition (units of "
        f"{', '.join(map(str, periods[:5]))} characters); the window's figures are left out"
    )
    return {"code": "looping-output", "window": window, "message": message}


def _invalid_note(window: str, entry: dict[str, Any]) -> str:
    left = ", ".join(entry["excluded"]) or "no figure"
    parts = [f"{entry[k]} {k}" for k in KINDS if entry[k]]
    return f"{window} invalid ({', '.join(parts)} of {entry['requests']}): left out: {left}"
