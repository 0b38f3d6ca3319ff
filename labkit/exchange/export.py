"""A labkit run written in another tool's format: the fields that tool defines, each computed by that tool's own
definition from labkit's per-request stamps (requests.csv), and nothing the run cannot give. Pure: a stored run
(store.StoredRun) and its request rows in, a JSON-ready dict out. docs/imports.md, "labkit export".

Stamps are labkit's (perf_counter_ns from the run's origin): `t_send` the request sent, `t_chunk1` the first
chunk, `t_first` the first token (reasoning or content), `t_last` the last token-bearing chunk, `chunk_t`/`chunk_n`
each token-bearing chunk's stamp and tokens. A field neither tool's definition nor the stamps can give is
left out (vLLM) or null (llama-benchy's optional peaks).
"""

from __future__ import annotations

import datetime as dt
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from labkit.errors import LabkitError
from labkit.exchange.model import EXPORT_RUN_KEY, EXPORT_VERSION
from labkit.store import StoredRun

FORMATS = ("vllm-bench", "llama-benchy")
NS = 1e9
PERCENTILES = (50, 99)


class ExportError(LabkitError):
    """A run that cannot be written in the format asked for; names the run and what it lacks."""


def _ok(rows: Sequence[Mapping[str, Any]], phase: str, concurrency: int) -> list[Mapping[str, Any]]:
    """The requests of one phase at one concurrency that labkit's own figures use: answered, not the cold turn."""
    return [
        r
        for r in rows
        if r.get("phase") == phase
        and int(r.get("concurrency") or 0) == concurrency
        and _true(r.get("ok"))
        and not _true(r.get("cold"))
    ]


def _true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


def _stats(name: str, values_s: Sequence[float]) -> dict[str, float]:
    """vLLM's statistics of one metric in ms: mean, median, population std and linear percentiles."""
    x = np.asarray(values_s, dtype=float) * 1000.0 if len(values_s) else np.zeros(1)
    out = {f"mean_{name}_ms": float(np.mean(x)), f"median_{name}_ms": float(np.median(x))}
    out[f"std_{name}_ms"] = float(np.std(x))
    for p in PERCENTILES:
        out[f"p{p}_{name}_ms"] = float(np.percentile(x, p))
    return out


def _stamps(r: Mapping[str, Any]) -> list[float]:
    return [float(t) / NS for t in r.get("chunk_t") or []]


def _gaps(r: Mapping[str, Any]) -> list[float]:
    """vLLM's ITLs of one request: the gaps between its chunks after the first. The first chunk is labkit's
    t_chunk1, which is also the first token-bearing stamp when it already carried a token (no gap there)."""
    first, stamps = float(r["t_chunk1"]) / NS, _stamps(r)
    times = stamps if stamps and stamps[0] <= first else [first, *stamps]
    return [float(g) for g in np.diff(times)]


def _busy(picked: Sequence[Mapping[str, Any]], send: Sequence[float], latency: Sequence[float]) -> float:
    """vLLM's duration, the wall time its requests ran: here the sum over labkit's lockstep turns (a group of
    concurrent requests, or one request at c1) of first send to last end, so the /metrics scrapes labkit makes
    between turns stay outside it, as vLLM's warm-up and scrapes are outside its own."""
    turns: dict[str, list[int]] = {}
    for i, r in enumerate(picked):
        group = r.get("group")
        turns.setdefault(f"g{group}" if group not in (None, "") else f"r{i}", []).append(i)
    return sum(
        max(send[i] + latency[i] for i in members) - min(send[i] for i in members)
        for members in turns.values()
    )


def vllm_bench(doc: StoredRun, rows: Sequence[Mapping[str, Any]], concurrency: int = 1) -> dict[str, Any]:
    """The run's decode requests at `concurrency` as `vllm bench serve --save-result --save-detailed` writes a
    run: TTFT to the first chunk, latency to the last token-bearing chunk, TPOT (latency − TTFT)/(N − 1), ITL
    the gaps between chunks, duration the time the turns ran (_busy)."""
    picked = _ok(rows, "decode", concurrency)
    if not picked:
        raise ExportError(f"run {doc.run_id}: no answered decode requests at concurrency {concurrency}")
    failed = sum(
        1
        for r in rows
        if r.get("phase") == "decode"
        and int(r.get("concurrency") or 0) == concurrency
        and not _true(r.get("ok"))
    )
    pacing = {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": concurrency}
    return _vllm_run(doc, picked, f"labkit {doc.run_id}", pacing, _busy, len(picked), failed)


def _vllm_run(
    doc: StoredRun,
    picked: Sequence[Mapping[str, Any]],
    label: str,
    pacing: Mapping[str, Any],
    duration_of: Callable[[Sequence[Mapping[str, Any]], list[float], list[float]], float],
    prompts: int,
    failed: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The vllm-bench result of these answered requests, computed vLLM's way: per request TTFT to the first chunk
    with choices (t_chunk1, else t_first), latency to the last token-bearing chunk, TPOT (latency − TTFT)/(N − 1),
    ITLs the gaps between chunks; `duration_of(picked, sends, latencies)` the benchmark's duration, `pacing` its
    rate, burstiness and concurrency keys, `extra` keys after the arrays."""
    send = [float(r["t_send"]) / NS for r in picked]
    first = [r["t_chunk1"] if r.get("t_chunk1") is not None else r["t_first"] for r in picked]
    ttft = [float(t) / NS - s for t, s in zip(first, send, strict=True)]
    latency = [float(r["t_last"]) / NS - s for r, s in zip(picked, send, strict=True)]
    n_out = [int(r["output_tokens"]) for r in picked]
    n_in = [int(r["prompt_tokens"]) for r in picked]
    itls = [_gaps(r) for r in picked]
    tpot = [(lat - t) / (n - 1) for lat, t, n in zip(latency, ttft, n_out, strict=True) if n > 1]
    duration = duration_of(picked, send, latency)
    api = doc.plan.measure.get("api", "chat")
    started = dt.datetime.fromisoformat(str(doc.started).replace("Z", "+00:00"))
    out: dict[str, Any] = {
        "date": started.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai-chat" if api == "chat" else "openai",
        "backend": "openai-chat" if api == "chat" else "openai",
        "label": label,
        "model_id": doc.provenance.model or doc.recipe,
        "tokenizer_id": None,
        "num_prompts": prompts,
        EXPORT_RUN_KEY: doc.run_id,  # as --metadata K=V pairs: text keys
        "labkit_recipe": f"{doc.recipe}/{doc.variant_id}",
        "labkit_recipe_hash": doc.provenance.recipe_hash or "",
        "labkit_version": doc.labkit_version or "",
        **pacing,
        "duration": duration,
        "completed": len(picked),
        "failed": failed,
        "total_input_tokens": sum(n_in),
        "total_output_tokens": sum(n_out),
        "request_throughput": len(picked) / duration,
        "request_goodput": None,
        "output_throughput": sum(n_out) / duration,
        "total_token_throughput": (sum(n_in) + sum(n_out)) / duration,
        "latencies": latency,
        "input_lens": n_in,
        "output_lens": n_out,
        "ttfts": ttft,
        "itls": itls,
        **(extra or {}),
        "errors": [""] * len(picked),
    }
    for name, values in (("ttft", ttft), ("tpot", tpot), ("itl", [g for gaps in itls for g in gaps])):
        out.update(_stats(name, values))
    out.update(_stats("e2el", latency))
    return out


@dataclass(frozen=True)
class Level:
    """One load level of a run: `closed` N streams (`c4`) or an open loop at a rate (`2/s`)."""

    closed: bool
    value: float

    @property
    def label(self) -> str:
        return f"c{self.value:g}" if self.closed else f"{self.value:g}/s"

    def holds(self, r: Mapping[str, Any]) -> bool:
        """Whether a request row belongs to this level."""
        level = r.get("load_level")
        return (
            r.get("phase") == "load"
            and r.get("load_loop") == ("closed" if self.closed else "open")
            and level is not None
            and float(level) == self.value
        )


def parse_level(text: str) -> Level:
    """`c4` (4 closed-loop streams) or `2/s` (2 requests/s, open loop), as the load table labels its rows."""
    closed = re.fullmatch(r"c(\d+)", text.strip())
    if closed:
        return Level(True, float(closed.group(1)))
    rate = re.fullmatch(r"(\d+(?:\.\d+)?)/s", text.strip())
    if rate and float(rate.group(1)) > 0:
        return Level(False, float(rate.group(1)))
    raise ExportError(f"--level {text!r}: a closed-loop level is c<N> (c4), an open-loop one <R>/s (2/s)")


def run_levels(rows: Sequence[Mapping[str, Any]]) -> list[Level]:
    """Every load level the run's requests ran at, closed loops first, each by its value (agentic session levels
    have no vllm-bench form)."""
    found = {
        Level(r.get("load_loop") == "closed", float(r["load_level"]))
        for r in rows
        if r.get("phase") == "load"
        and r.get("load_level") is not None
        and r.get("load_loop") in ("closed", "open")
    }
    return sorted(found, key=lambda lv: (not lv.closed, lv.value))


def _arrival(doc: StoredRun) -> dict[str, Any]:
    """vLLM's pacing of an open level from the plan's [measure.load] arrival: Poisson is burstiness 1, gamma its
    shape. vLLM paces a constant level with --burstiness inf, which its result file then holds as a bare
    Infinity, not JSON; so a constant level names its arrival in a text key instead and has no burstiness."""
    load = doc.plan.measure.get("load") or {}
    arrival = load.get("arrival") if isinstance(load, Mapping) else None
    if arrival in (None, "poisson"):  # labkit's default arrival is Poisson (recipe DEFAULT_ARRIVAL)
        return {"burstiness": 1.0}
    if arrival == "gamma" and isinstance(load.get("burstiness"), int | float):
        return {"burstiness": float(load["burstiness"])}
    return {"labkit_arrival": str(arrival)}


def vllm_bench_level(doc: StoredRun, rows: Sequence[Mapping[str, Any]], level: Level) -> dict[str, Any]:
    """One load level as `vllm bench serve --save-result --save-detailed` writes a run at that level: a closed
    level as --max-concurrency N at an infinite rate, an open one as --request-rate R. Per request vLLM's TTFT
    (to the first chunk with choices, labkit's t_chunk1), latency to the last token-bearing chunk, TPOT and ITLs
    as the decode export's; the duration the level's span, first send to the last stream's end, every request
    of it (every repetition) inside, as vLLM's benchmark duration covers its failed requests."""
    mine = [r for r in rows if level.holds(r)]
    picked = [r for r in mine if _true(r.get("ok"))]
    if not picked:
        have = ", ".join(lv.label for lv in run_levels(rows)) or "none"
        raise ExportError(
            f"run {doc.run_id} has no answered load requests at {level.label}; its levels: {have}"
        )
    ends = [(float(r["t_send"]), float(r["t_end"])) for r in mine if r.get("t_end") is not None]
    span = (max(b for _, b in ends) - min(a for a, _ in ends)) / NS
    pacing: dict[str, Any] = (
        {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": int(level.value)}
        if level.closed
        else {"request_rate": level.value, "max_concurrency": None, **_arrival(doc)}
    )
    return _vllm_run(
        doc,
        picked,
        f"labkit {doc.run_id} {level.label}",
        {"labkit_level": level.label, **pacing},
        lambda *_: span,
        len(mine),
        len(mine) - len(picked),
        {"start_times": [float(r["t_send"]) / NS for r in picked]},
    )


def _metric(values: Sequence[float]) -> dict[str, Any] | None:
    """llama-benchy's {mean, std, values}: numpy mean and population std; None for no values."""
    if not values:
        return None
    return {
        "mean": float(np.mean(values)),
        "std": float(np.std(values)),
        "values": [float(v) for v in values],
    }


def _decode_tokens(r: Mapping[str, Any]) -> tuple[int, float] | None:
    """llama-benchy's decode of one request: tokens stamped after the first content chunk and the span from it
    to the last; None for a single chunk."""
    stamps, counts = _stamps(r), [int(n) for n in r.get("chunk_n") or []]
    if len(stamps) < 2 or len(counts) != len(stamps) or stamps[-1] <= stamps[0]:
        return None
    return int(r["output_tokens"]) - counts[0], stamps[-1] - stamps[0]


def benchy_row(
    rows: Sequence[Mapping[str, Any]], concurrency: int, prompt: int, response: int
) -> dict[str, Any]:
    """One llama-benchy row of requests (c1: one per run; cK: the run's lockstep groups as batches), latency
    mode none: est_ppt = ttfr."""
    sends = [float(r["t_send"]) / NS for r in rows]
    ttfr = [float(r["t_chunk1"]) / NS - s for r, s in zip(rows, sends, strict=True)]
    # llama-benchy's e2e_ttft ends at the first token, reasoning or content: labkit's t_first
    ttft = [float(r["t_first"]) / NS - s for r, s in zip(rows, sends, strict=True)]
    prompts = [int(r["prompt_tokens"]) for r in rows]
    decode = [_decode_tokens(r) for r in rows]
    per_request_tg = [n / span for n, span in (d for d in decode if d is not None)]
    per_request_pp = [p / t for p, t in zip(prompts, ttfr, strict=True) if t > 0]
    if concurrency == 1:
        tg, pp = per_request_tg, per_request_pp
    else:
        batches: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            batches.setdefault(str(r.get("group")), []).append(i)
        tg, pp = [], []
        for members in batches.values():
            counted = [(decode[i], _stamps(rows[i])) for i in members]
            if all(d is not None for d, _ in counted):
                total = sum(d[0] for d, _ in counted if d is not None)
                tg.append(total / (max(s[-1] for _, s in counted) - min(s[0] for _, s in counted)))
            first_token = max(sends[i] + ttft[i] for i in members)
            pp.append(sum(prompts[i] for i in members) / (first_token - min(sends[i] for i in members)))
    return {
        "concurrency": concurrency,
        "context_size": 0,
        "prompt_size": prompt,
        "response_size": response,
        "is_context_prefill_phase": False,
        "pp_throughput": _metric(pp),
        "pp_req_throughput": _metric(per_request_pp),
        "tg_throughput": _metric(tg),
        "tg_req_throughput": _metric(per_request_tg),
        "peak_throughput": None,
        "peak_req_throughput": None,
        "ttfr": _metric([t * 1000 for t in ttfr]),
        "est_ppt": _metric([t * 1000 for t in ttfr]),
        "e2e_ttft": _metric([t * 1000 for t in ttft]),
        "throughput_over_time": None,
        "requests_throughput_over_time": None,
    }


def llama_benchy(doc: StoredRun, rows: Sequence[Mapping[str, Any]], version: str) -> dict[str, Any]:
    """The run as llama-benchy 0.4's JSON: a row per decode concurrency (prompt_size the decode prompts'
    median length, response_size the requested tokens) and per prefill target length (response 1)."""
    out_rows = []
    decode = [r for r in rows if r.get("phase") == "decode"]
    for c in sorted({int(r["concurrency"]) for r in decode}):
        picked = _ok(rows, "decode", c)
        if picked:
            prompt = int(statistics.median(int(r["prompt_tokens"]) for r in picked))
            out_rows.append(benchy_row(picked, c, prompt, int(picked[0]["requested_tokens"])))
    prefill = [r for r in rows if r.get("phase") == "prefill" and _true(r.get("ok"))]
    for target in sorted({int(r["prompt_target"]) for r in prefill}):
        picked = [r for r in prefill if int(r["prompt_target"]) == target]
        out_rows.append(benchy_row(picked, 1, target, 1))
    if not out_rows:
        raise ExportError(f"run {doc.run_id}: no answered decode or prefill requests to write")
    started = dt.datetime.fromisoformat(str(doc.started).replace("Z", "+00:00"))
    return {
        "version": EXPORT_VERSION + version,
        "timestamp": started.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ"),
        "latency_mode": "none",
        "latency_ms": 0.0,
        "model": doc.provenance.model or doc.recipe,
        "prefix_caching_enabled": False,  # llama-benchy's own depth option, which this run did not use
        "max_concurrency": max(row["concurrency"] for row in out_rows),
        "benchmarks": out_rows,
    }
