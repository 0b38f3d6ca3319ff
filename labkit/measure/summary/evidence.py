"""A run's window evidence in its summary: what the engine's /metrics said about each window, pooled over the
repetitions (`summary.evidence`), and the findings worded as flags (counter reset, foreign traffic, busy at
start, not drained, prefix-cache hits): docs/measurement.md, "Per-run evidence".

Pure: the evidence log's windows (labkit/measure/server/scrapes.py) in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from labkit.measure.prompt.context import cached_by_design
from labkit.measure.request.recording import CACHE_HIT_TOLERANCE
from labkit.measure.server.scrapes import WindowEvidence, reset_message


def pooled_evidence(windows: Sequence[WindowEvidence]) -> dict[str, dict[str, Any]]:
    """Per window name, pooled over repetitions: see docs/measurement.md, "Per-run evidence"."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(w.name for w in windows):
        ws = [w for w in windows if w.name == name]
        e: dict[str, Any] = {"sent": sum(w.sent for w in ws), "scrapes": sum(w.scrapes for w in ws)}
        for key, value in ws[0].start.items():
            e[f"{key}_start"] = value
        for key, value in ws[-1].end.items():
            e[f"{key}_end"] = value
        if any(w.start or w.end for w in ws):
            e["busy_scrapes"] = sum(w.busy for w in ws)
        for key, attr in (
            ("finished", "finished"),
            ("prefix_cache_hits", "hits"),
            ("prefix_cache_queries", "queries"),
        ):
            values = [getattr(w, attr) for w in ws]
            if all(v is not None for v in values) and not any(w.resets for w in ws):
                e[key] = sum(values)
        if any(w.drain_waits for w in ws):
            e["drain_waits"] = sum(w.drain_waits for w in ws)
            e["drain_wait_s"] = round(sum(w.drain_wait_s for w in ws), 3)
            e["undrained"] = [
                {"where": where, "running": r, "waiting": q, "waited_s": round(t, 3)}
                for w in ws
                for where, r, q, t in w.undrained
            ]
        if any(w.resets for w in ws):
            e["counter_resets"] = [
                {"counter": c, "before": b, "after": a} for w in ws for c, b, a in w.resets
            ]
        out[name] = e
    return out


def evidence_flags(windows: Sequence[WindowEvidence]) -> list[dict[str, str]]:
    """One flag per finding and window repetition: {"code", "window", "message"}."""
    many = len({w.rep for w in windows}) > 1
    out = []
    for w in windows:
        where = f"{w.name} (repetition {w.rep + 1})" if many else w.name
        for code, message in window_findings(w):
            out.append({"code": code, "window": w.name, "message": f"{where}: {message}"})
    return out


def _gauges_text(u: tuple[str, float, float, float]) -> str:
    return f"{u[1]:g} running and {u[2]:g} waiting"


def window_findings(w: WindowEvidence) -> list[tuple[str, str]]:
    """(code, message) of what one window's evidence shows: docs/measurement.md, "Per-run evidence"."""
    found = []
    if w.resets:
        found.append(
            (
                "counter-reset",
                reset_message(w.resets)
                + ", so its counter-derived figures (acceptance, prefix-cache hits, the "
                "engine's view, the foreign-traffic check) are invalid and its timed requests span two boots",
            )
        )
    if w.finished is not None and w.finished > w.sent_valid:
        found.append(
            (
                "foreign-traffic",
                f"the engine finished {w.finished:g} requests while labkit sent {w.sent_valid}: "
                f"{w.finished - w.sent_valid:g} came from another client (Δ{w.finished_by} summed over labels)",
            )
        )
    if w.live and (w.start.get("running") or w.start.get("waiting")) and not w.start_drained:
        waited = next((t for where, _, _, t in w.undrained if where == "start"), None)
        after = (
            "" if not waited else f", and still {_gauges_text(w.undrained[0])} after waiting {waited:.1f} s"
        )
        found.append(
            (
                "busy-at-start",
                f"the engine showed {w.start.get('running', 0):g} running and {w.start.get('waiting', 0):g} "
                f"waiting requests when the window opened, with none of labkit's in flight{after}: someone "
                "else was using it",
            )
        )
    inside = [u for u in w.undrained if u[0] != "start"]
    if inside:
        first = inside[0]
        still = (
            f", still after waiting {first[3]:.1f} s" if first[3] else " (not waited for: drain_timeout 0)"
        )
        found.append(
            (
                "not-drained",
                f"at {len(inside)} of its boundaries between labkit's requests the engine did not drain: "
                f"{_gauges_text(first)} {first[0]}{still}, with none of "
                "labkit's in flight: the requests next to it may have shared the engine",
            )
        )
    if w.hits is not None and w.hit_pairs and not cached_by_design(w.name):
        found.append(
            (
                "prefix-cache-hit",
                f"{w.hit_pairs} of its {w.pairs} request windows hit the prefix cache for more than "
                f"{CACHE_HIT_TOLERANCE} tokens per request ({w.hits:g} of {w.queries:g} prompt tokens "
                "cached): its prompts were not new to the engine",
            )
        )
    return found
