"""Is labkit's load client ever the bottleneck? labkit's open and closed loops against `vllm bench serve`, judged
by what the simulator logged.

One fast simulator (decode 2,000 t/s per stream, prefill 200,000 t/s, batch_beta 0) serves both clients in the
same run, one level after the other: labkit's load workload (`run_bench` with only a `[measure.load]` level) and
`vllm bench serve` (the vLLM CPU build's, prompts of the tiny model's tokenizer, no downloads), both with prompts of
about PROMPT tokens and exactly OUTPUT tokens. Each client's requests of a level are read back from the
simulator's ground truth (GET /sim/requests: server-side arrival, first and last token, chunks), so both are
judged by one clock and one definition, not by their own reports:
- open loop at rising rates R (constant arrivals by default: labkit's `arrival="constant"`, vllm's
  `--burstiness inf`, whose gaps are exactly 1/R; `--arrival poisson` draws both as Poisson, each from its own
  seed, so their achieved rates then differ by sampling noise too): the achieved arrival rate
  (n − 1)/(last arrival − first arrival) against R, the gaps' coefficient of variation, the p99 of
  |gap − 1/R| and of the drift (arrival i − first arrival − i/R) for constant arrivals, chunks/s delivered,
  and labkit's own lateness p99 and client-bound verdict (summary.load), beside the host's floor: the p99
  lateness of labkit's wait (`pacing.until`) alone at that rate, no request sent (on two cores shared with other
  work, the host's scheduling, not the client, sets most of the tail);
- closed loop at rising concurrency C (labkit `concurrency=(C,)`, vllm `--max-concurrency C --request-rate
  inf`): requests/s and chunks/s over the level's span, and the mean number in flight as the server saw it.
Both kinds print each client's CPU milliseconds per request over the level's span (its process's CPU time from
/proc: this process for labkit's, the `vllm` process for vllm's), and every other level vllm runs first, so a
drift of the shared machine's load favours neither.
The simulator's headroom is measured first: a minimal raw-socket client keeps HEADROOM_STREAMS streams open;
the chunks/s the simulator logged divided by its CPU share meanwhile (its process's CPU time from /proc,
sampled in a thread) is its ceiling on a core of its own: chunks per sim CPU second. A level is marked
sim-bound when the simulator was busy most of the level's span, or emitted late against its own schedule (a
starved core: on two shared cores the client's CPU is the sim's loss), or the level's chunks/s comes near that
ceiling: a shortfall there is not the client's alone.

    .venv/bin/python benchmarks/bench_load_client.py [--quick] [--rates 10,50] [--concurrency 4,32]
                                                      [--requests N] [--arrival constant|poisson]

It prints; it bounds nothing (exit 0 whatever the figures; 2 when vLLM is not installed). The goal line says
whether labkit sustained at least as much as `vllm bench serve` (within TOLERANCE) at every level.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tabulate import tabulate  # noqa: E402

from labkit import tinymodel  # noqa: E402
from labkit.measure import BenchOptions, run_bench  # noqa: E402
from labkit.measure.request.pacing import until  # noqa: E402
from labkit.measure.runner import _loop_factory  # noqa: E402
from labkit.measure.summary.latency import percentile  # noqa: E402
from labkit.measure.summary.load import load_window  # noqa: E402
from labkit.recipe import DecodePlan, LoadPlan, MeasurePlan, PrefillPlan  # noqa: E402
from labkit.sim.oracle import SimOracle  # noqa: E402
from tests.support.tool_files import OFFLINE  # noqa: E402
from tests.support.vllm import vllm_available, vllm_executable  # noqa: E402

SIM_SETS = {"decode_tps": 2000, "prefill_tps": 200_000, "batch_beta": 0}
PORTS = (18640, 18679)  # away from the tests' 18200-18299
PROMPT, OUTPUT = 64, 32
RATES, QUICK_RATES = (10.0, 25.0, 50.0, 100.0, 200.0), (20.0, 100.0)
CONCURRENCY, QUICK_CONCURRENCY = (1, 4, 16, 64), (4, 32)
REQUESTS, QUICK_REQUESTS = 200, 100  # per level and client (a closed level: at least 4 per stream)
HEADROOM_STREAMS = 64
TOLERANCE = 0.98  # labkit "sustains as much" when its figure is at least this share of vllm's
SIM_BUSY = 0.85  # the simulator's CPU share over a level's span above which the level is sim-bound
SIM_LATE_S = 0.005  # ... or its emissions' p99 lateness against its own schedule above this
SIM_NEAR = 0.8  # ... or the level's chunks/s above this share of the measured ceiling
SAMPLE_S = 0.05  # the simulator's CPU time is read this often
VLLM_TIMEOUT_S = 600.0


def cpu_seconds(pid: int) -> float:
    """A process's CPU seconds so far, all its threads (user + system, /proc/<pid>/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler:
    """The CPU seconds of the simulator and of the client running now (`client`: a pid, this process for
    labkit's), read every SAMPLE_S on perf_counter, so their busy shares over any span the truth names can be
    read afterwards."""

    def __init__(self, sim_pid: int):
        self.sim_pid, self.client = sim_pid, os.getpid()
        self.samples: list[tuple[float, int, float]] = []  # (t, pid, cpu seconds)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            for pid in {self.sim_pid, self.client}:
                try:
                    self.samples.append((t, pid, cpu_seconds(pid)))
                except (OSError, ValueError):
                    pass  # a client that just ended
            self.stop.wait(SAMPLE_S)

    def __enter__(self) -> CpuSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(2)

    def busy(self, t0: float, t1: float, pid: int | None = None) -> float | None:
        """CPU seconds per second of `pid` (the simulator's by default) over [t0, t1], from the samples around
        it (the last one when the process ended before t1); None when none cover it."""
        mine = [(t, c) for t, p, c in self.samples if p == (pid or self.sim_pid)]
        before = [s for s in mine if s[0] <= t0]
        after = [s for s in mine if s[0] >= t1] or mine[-1:]
        if not before or not after or after[0][0] <= before[-1][0]:
            return None
        (a, ca), (b, cb) = before[-1], after[0]
        return (cb - ca) / (b - a)


class Truth:
    """The simulator's requests since the last read (GET /sim/requests?since=N), so each phase gets its own."""

    def __init__(self, url: str):
        self.url, self.seen = url, 0

    def new(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/sim/requests?since={self.seen}", timeout=30) as r:
            reqs = sorted(json.loads(r.read())["requests"], key=lambda t: t["index"])
        if reqs:
            self.seen = reqs[-1]["index"]
        return reqs


@dataclass
class Figures:
    """One client's level as the simulator logged it (the last `n` requests of the phase: its own warm-up or
    test request before them is left out)."""

    n: int
    arrival_rate: float  # (n − 1) / (last arrival − first arrival)
    request_rate: float  # n / (last token of any − first arrival)
    chunks_s: float  # chunks / the same span
    gap_cv: float
    gap_dev_p99_ms: float | None  # p99 of |gap − 1/R| (constant arrivals)
    drift_p99_ms: float | None  # p99 of arrival i − first − i/R (constant arrivals)
    in_flight: float  # mean requests in flight over the span
    sim_busy: float | None
    client_busy: float | None  # the client's CPU share over the span
    sim_late_p99_ms: float
    prompt_tokens: float


def figures(
    reqs: list[dict], n: int, cpu: CpuSampler, client: int, rate: float | None, constant: bool
) -> Figures:
    """The level's figures from its last `n` requests in the truth (`rate` for the schedule's figures, `client`
    the pid whose CPU share is read)."""
    reqs = reqs[-n:]
    arr = sorted(t["t_arrival"] for t in reqs)
    end = max(t["t_last"] or t["t_arrival"] for t in reqs)
    gaps = [b - a for a, b in itertools.pairwise(arr)]
    span = end - arr[0]
    dev = drift = None
    if rate and constant:
        dev = percentile([abs(g - 1 / rate) * 1000 for g in gaps], 99)
        drift = percentile([(a - arr[0] - i / rate) * 1000 for i, a in enumerate(arr)], 99)
    return Figures(
        n=len(reqs),
        arrival_rate=(len(arr) - 1) / (arr[-1] - arr[0]) if arr[-1] > arr[0] else float("nan"),
        request_rate=len(reqs) / span,
        chunks_s=sum(t["chunks"] for t in reqs) / span,
        gap_cv=statistics.pstdev(gaps) / statistics.fmean(gaps) if len(gaps) > 1 else float("nan"),
        gap_dev_p99_ms=dev,
        drift_p99_ms=drift,
        in_flight=sum((t["t_last"] or t["t_arrival"]) - t["t_arrival"] for t in reqs) / span,
        sim_busy=cpu.busy(arr[0], end),
        client_busy=cpu.busy(arr[0], end, client),
        sim_late_p99_ms=(percentile([t["max_lateness"] for t in reqs], 99) or 0.0) * 1000,
        prompt_tokens=statistics.fmean(t["prompt_tokens"] for t in reqs),
    )


def labkit_level(url: str, n: int, rate: float | None, conc: int | None, arrival: str) -> dict:
    """One level of labkit's load workload (only it: no decode turns, no prefill sizes); its lateness p99 (ms)
    and client-bound verdict for an open level."""
    load = LoadPlan(
        concurrency=(conc,) if conc else (),
        rate=(rate,) if rate else (),
        arrival=arrival if rate else None,
        level_requests=n,
        prompt_tokens=PROMPT,
        output_tokens=OUTPUT,
        warmup=1,
    )
    plan = MeasurePlan("chat", 1, DecodePlan((1,), 0, OUTPUT, 0), PrefillPlan((), 1), 60.0, seed=7)
    res = run_bench(url, plan.with_workload("load", load), BenchOptions(progress=False))
    recs = [r for r in res.records if r.phase == "load"]
    out: dict = {"failed": sum(not r.ok for r in recs)}
    if rate:
        late = [r.lateness_s for r in recs if r.lateness_s is not None]
        out["lateness_p99_ms"] = (percentile(late, 99) or 0.0) * 1000
        out["client_bound"] = res.summary.load.get(load_window("open", rate), {}).get("client_bound")
    return out


def vllm_level(
    cpu: CpuSampler,
    url: str,
    tokenizer: Path,
    work: Path,
    n: int,
    rate: float | None,
    conc: int | None,
    arrival: str,
):
    """One `vllm bench serve` run, its pid told to `cpu` as the client's; (pid, None when it ran, else the tail
    of its log)."""
    argv = [str(vllm_executable()), "bench", "serve", "--backend", "openai-chat", "--endpoint"]
    argv += ["/v1/chat/completions", "--base-url", url, "--model", "sim-test", "--tokenizer", str(tokenizer)]
    argv += [
        "--dataset-name",
        "random",
        "--random-input-len",
        str(PROMPT),
        "--random-output-len",
        str(OUTPUT),
    ]
    argv += ["--num-prompts", str(n), "--ignore-eos", "--disable-tqdm", "--seed", "7"]
    if rate:
        argv += ["--request-rate", str(rate), "--burstiness", "inf" if arrival == "constant" else "1"]
    else:
        argv += ["--request-rate", "inf", "--max-concurrency", str(conc)]
    log = work / f"vllm-{'r' if rate else 'c'}{rate or conc}.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(
            argv, stdout=f, stderr=subprocess.STDOUT, env=dict(os.environ, **OFFLINE), cwd=work
        )
        cpu.client = proc.pid
        try:
            code = proc.wait(VLLM_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    return proc.pid, (None if code == 0 else log.read_text(errors="replace")[-1500:])


async def _raw_closed(host: str, port: int, streams: int, total: int) -> None:
    """`total` streamed chat requests, `streams` at a time, over bare sockets: read until [DONE], nothing parsed
    (the cheapest client there is, so what limits it is the server)."""
    order = itertools.count()

    async def stream(i: int) -> None:
        while (k := next(order)) < total:
            body = json.dumps(
                {
                    "model": "sim-test",
                    "messages": [{"role": "user", "content": f"headroom {i} {k} " + "word " * (PROMPT - 10)}],
                    "max_tokens": OUTPUT,
                    "ignore_eos": True,
                    "stream": True,
                }
            ).encode()
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
            tail = b""
            while b"[DONE]" not in tail:
                data = await reader.read(65536)
                if not data:
                    break
                tail = tail[-16:] + data
            writer.close()

    await asyncio.gather(*(stream(i) for i in range(streams)))


@dataclass
class Headroom:
    """The simulator under HEADROOM_STREAMS raw streams: what it delivered, how busy it was, and so the chunks
    one of its CPU seconds delivers (its ceiling on a core of its own), with the raw client's own CPU share."""

    seen: Figures
    capacity: float  # chunks per second of the simulator's CPU time
    client_busy: float


def headroom(sim: SimOracle, truth: Truth, cpu: CpuSampler, total: int) -> Headroom:
    """The simulator's chunks/s with HEADROOM_STREAMS raw streams open on labkit's event loop (uvloop when
    installed); divided by its CPU share, its ceiling here."""
    truth.new()
    c0, w0 = time.process_time(), time.perf_counter()
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_raw_closed("127.0.0.1", sim.port, HEADROOM_STREAMS, total))
    client = (time.process_time() - c0) / (time.perf_counter() - w0)
    seen = figures(truth.new(), total, cpu, os.getpid(), None, False)
    return Headroom(seen, seen.chunks_s / seen.sim_busy if seen.sim_busy else seen.chunks_s, client)


@dataclass
class Rig:
    """What every level's two runs share: the simulator, its truth, the CPU sampler, the tokenizer folder for
    vllm, the folder of its logs and the arrival kind."""

    url: str
    truth: Truth
    cpu: CpuSampler
    tokenizer: Path
    work: Path
    arrival: str
    constant: bool

    def labkit(self, n: int, rate: float | None, conc: int | None) -> tuple[dict, Figures]:
        """labkit's level: its own figures, and the simulator's."""
        print(f"{rate or conc}: labkit", file=sys.stderr)
        own = labkit_level(self.url, n, rate, conc, self.arrival)
        return own, figures(self.truth.new(), n, self.cpu, os.getpid(), rate, self.constant)

    def vllm(self, n: int, rate: float | None, conc: int | None) -> Figures | None:
        """vllm bench serve's level as the simulator logged it; None when it failed (its log tail printed)."""
        print(f"{rate or conc}: vllm bench serve", file=sys.stderr)
        pid, failed = vllm_level(self.cpu, self.url, self.tokenizer, self.work, n, rate, conc, self.arrival)
        self.cpu.client = os.getpid()
        reqs = self.truth.new()
        if failed is not None:
            print(f"vllm bench serve failed:\n{failed}", file=sys.stderr)
            return None
        return figures(reqs, n, self.cpu, pid, rate, self.constant)


def host_floor(rate: float, n: int) -> float:
    """The p99 lateness (ms) of labkit's open-loop wait (`pacing.until`) alone at `rate` on labkit's event loop, no
    request sent: what this host's scheduling gives a sender that does nothing else, beside labkit's own."""

    async def sends() -> list[float]:
        start = time.perf_counter_ns() + 2_000_000
        late = []
        for k in range(n):
            due = start + int(k / rate * 1e9)
            await until(due)
            late.append((time.perf_counter_ns() - due) / 1e6)
        return late

    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return percentile(runner.run(sends()), 99) or 0.0


def sim_bound(f: Figures, ceiling: float) -> str:
    """Why the simulator, not the client, may have limited this phase; "" when nothing says so."""
    why = []
    if f.sim_busy is not None and f.sim_busy >= SIM_BUSY:
        why.append(f"sim busy {f.sim_busy:.0%}")
    if f.sim_late_p99_ms > SIM_LATE_S * 1000:
        why.append(f"sim late {f.sim_late_p99_ms:.0f} ms")
    if f.chunks_s >= SIM_NEAR * ceiling:
        why.append("near ceiling")
    return ", ".join(why)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _cpu_ms(f: Figures) -> str:
    """The client's CPU milliseconds per request over the level's span."""
    return "-" if f.client_busy is None else f"{f.client_busy / f.request_rate * 1000:.2f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick", action="store_true", help=f"rates {QUICK_RATES}, concurrency {QUICK_CONCURRENCY}"
    )
    p.add_argument("--rates", help="comma-separated requests/s (default: the full or quick list)")
    p.add_argument("--concurrency", help="comma-separated streams (default: the full or quick list)")
    p.add_argument(
        "--requests", type=int, help=f"per level and client (default {REQUESTS}, quick {QUICK_REQUESTS})"
    )
    p.add_argument("--arrival", choices=("constant", "poisson"), default="constant")
    args = p.parse_args()
    if vllm_available() is not None:
        print(f"vLLM is not available: {vllm_available()}", file=sys.stderr)
        return 2
    rates = (
        tuple(float(x) for x in args.rates.split(","))
        if args.rates
        else (QUICK_RATES if args.quick else RATES)
    )
    concs = (
        tuple(int(x) for x in args.concurrency.split(","))
        if args.concurrency
        else (QUICK_CONCURRENCY if args.quick else CONCURRENCY)
    )
    n = args.requests or (QUICK_REQUESTS if args.quick else REQUESTS)
    constant = args.arrival == "constant"
    tokenizer = tinymodel.ensure("tiny-llama", log=None, fmt="hf")
    work = Path(tempfile.mkdtemp(prefix="labkit-loadclient-"))
    load0 = os.getloadavg()[0]
    open_rows, closed_rows, short, bound, missing = [], [], [], [], []
    with SimOracle(sets=SIM_SETS, ports=PORTS) as sim, CpuSampler(sim.proc.proc.pid) as cpu:
        truth = Truth(sim.url)
        rig = Rig(sim.url, truth, cpu, tokenizer, work, args.arrival, constant)
        room = headroom(sim, truth, cpu, max(n, 3 * HEADROOM_STREAMS))
        ceiling = room.capacity
        headline = (
            f"sim headroom: {room.seen.chunks_s:,.0f} chunks/s ({room.seen.request_rate:.0f} req/s) seen with "
            f"{HEADROOM_STREAMS} raw streams at sim busy {_pct(room.seen.sim_busy)} (emissions late p99 "
            f"{room.seen.sim_late_p99_ms:.1f} ms, raw client busy {room.client_busy:.0%}): ceiling "
            f"{ceiling:,.0f} chunks per sim CPU second"
        )
        print(headline, file=sys.stderr)
        levels = [("rate", r) for r in rates] + [("conc", c) for c in concs]
        for i, (kind, level) in enumerate(levels):
            rate, conc = (level, None) if kind == "rate" else (None, int(level))
            count = n if rate else max(n, 4 * conc)
            rig.truth.new()
            # every other level vllm goes first, so a drift of the shared machine's load favours neither
            if i % 2 == 0:
                (lk_own, lk), vl = rig.labkit(count, rate, conc), rig.vllm(count, rate, conc)
            else:
                vl = rig.vllm(count, rate, conc)
                lk_own, lk = rig.labkit(count, rate, conc)
            if vl is None:
                missing.append(f"{kind} {level:g}")
                continue
            floor = host_floor(rate, count) if rate else None
            flag = "; ".join(
                f"{who}: {why}" for who, f in (("lk", lk), ("vl", vl)) if (why := sim_bound(f, ceiling))
            )
            label = f"{level:g}/s" if rate else f"c{conc}"
            ratio = (lk.arrival_rate / vl.arrival_rate) if rate else (lk.request_rate / vl.request_rate)
            if ratio < TOLERANCE:
                (bound if flag else short).append(label)
            if rate:
                open_rows.append(
                    [
                        label,
                        f"{lk.arrival_rate:.2f}",
                        f"{vl.arrival_rate:.2f}",
                        f"{ratio:.3f}",
                        f"{lk.gap_cv:.3f}",
                        f"{vl.gap_cv:.3f}",
                        f"{_ms(lk.gap_dev_p99_ms)} / {_ms(vl.gap_dev_p99_ms)}",
                        f"{_ms(lk.drift_p99_ms)} / {_ms(vl.drift_p99_ms)}",
                        f"{lk.chunks_s:,.0f}",
                        f"{vl.chunks_s:,.0f}",
                        f"{lk_own['lateness_p99_ms']:.2f}",
                        _ms(floor),
                        "yes" if lk_own["client_bound"] else "no",
                        f"{_cpu_ms(lk)} / {_cpu_ms(vl)}",
                        f"{_pct(lk.sim_busy)} / {_pct(vl.sim_busy)}",
                        flag or "no",
                    ]
                )
            else:
                closed_rows.append(
                    [
                        label,
                        f"{lk.request_rate:.1f}",
                        f"{vl.request_rate:.1f}",
                        f"{ratio:.3f}",
                        f"{lk.in_flight:.1f}",
                        f"{vl.in_flight:.1f}",
                        f"{lk.chunks_s:,.0f}",
                        f"{vl.chunks_s:,.0f}",
                        f"{_cpu_ms(lk)} / {_cpu_ms(vl)}",
                        f"{_pct(lk.sim_busy)} / {_pct(vl.sim_busy)}",
                        flag or "no",
                    ]
                )
            if lk_own["failed"]:
                print(f"  labkit: {lk_own['failed']} failed requests at {label}", file=sys.stderr)
            print(
                f"  prompt tokens the sim counted: labkit {lk.prompt_tokens:.0f}, vllm {vl.prompt_tokens:.0f}",
                file=sys.stderr,
            )
    print(
        f"\nlabkit's load client vs vllm bench serve on one simulator ({SIM_SETS}), {n} requests a level, "
        f"prompt ~{PROMPT} / output {OUTPUT} tokens, {args.arrival} arrivals; figures from the simulator's truth"
    )
    print(f"{headline}; load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    if open_rows:
        print(
            "\nOpen loop (achieved arrival rate = (n-1)/(last - first arrival); lk = labkit, vl = vllm bench serve)"
        )
        headers = [
            "rate",
            "lk req/s",
            "vl req/s",
            "lk/vl",
            "lk gap CV",
            "vl gap CV",
            "|gap-1/R| p99 ms lk / vl",
            "drift p99 ms lk / vl",
            "lk chunks/s",
            "vl chunks/s",
            "lk lateness p99 ms",
            "host floor p99 ms",
            "lk client-bound",
            "client CPU ms/req lk / vl",
            "sim busy lk / vl",
            "sim-bound",
        ]
        print(tabulate(open_rows, headers=headers, disable_numparse=True))
    if closed_rows:
        print("\nClosed loop (requests/s and chunks/s over first arrival to last token; in flight = mean)")
        headers = [
            "streams",
            "lk req/s",
            "vl req/s",
            "lk/vl",
            "lk in flight",
            "vl in flight",
            "lk chunks/s",
            "vl chunks/s",
            "client CPU ms/req lk / vl",
            "sim busy lk / vl",
            "sim-bound",
        ]
        print(tabulate(closed_rows, headers=headers, disable_numparse=True))
    verdict = "yes" if not short and not bound else "no"
    where = ", ".join(short + [f"{x} (sim-bound)" for x in bound]) or "none"
    print(
        f"\nlabkit sustains at least as much as vllm bench serve at every level (within {1 - TOLERANCE:.0%}): "
        f"{verdict} (levels where not: {where})"
    )
    if missing:
        print(f"vllm bench serve failed at: {', '.join(missing)} (its log is in {work})")
    print(f"vllm bench serve logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
