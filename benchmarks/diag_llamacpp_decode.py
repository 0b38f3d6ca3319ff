"""Why do decode samples on llama.cpp scatter? Per-request detail for labkit's client and the oracle, interleaved.

A diagnostic, not a gate: it starts `llama_cpp.server` on labkit's tiny GGUF with the thread counts given, runs
pairs of 128-token forced-length streams (labkit's StreamClient, then the oracle of tests/support/llamacpp.py,
order alternating) and prints per client: decode t/s (median, min, max), client CPU per stream, the server's
CPU and context switches per stream (all its threads, from /proc), chunk gaps, and the engine's own
`eval time` per token from its log. It found issue 8's bimodal decode: with `--n_threads 2` on 2 cores the
engine's own ms/token triples and its context switches go up ~20x whenever anything else holds a core.

    /work/venv/bin/python benchmarks/diag_llamacpp_decode.py --threads 2 [--hog] [--model default]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from labkit import tinymodel  # noqa: E402
from labkit.measure.prompt import prompts as pr  # noqa: E402
from labkit.measure.request.client import StreamClient, StreamRequest
from tests.support import llamacpp as oc  # noqa: E402

NS = 1e9


def server_cpu(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, voluntary, involuntary context switches) summed over the process's threads."""
    tck = os.sysconf("SC_CLK_TCK")
    cpu, vol, invol = 0.0, 0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            f = (task / "stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(f[11]) + int(f[12])) / tck
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    vol += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    invol += int(line.split()[1])
        except (FileNotFoundError, IndexError):
            pass  # a thread ended while we read
    return cpu, vol, invol


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["small", "default"], default="small")
    ap.add_argument("--threads", type=int, default=1, help="--n_threads (decode)")
    ap.add_argument("--pairs", type=int, default=15)
    ap.add_argument("--n", type=int, default=128, help="output tokens per stream")
    ap.add_argument("--hog", action="store_true", help="run one busy-looping process beside it")
    args = ap.parse_args()
    if not oc.have_llama_cpp():
        print("llama_cpp is not importable: pip install -e '.[llamacpp]'", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="labkit-diag-"))
    model = tinymodel.ensure(
        "tiny-llama" if args.model == "default" else "tiny-llama-small", root=tmp / "models"
    )
    server = oc.start_server(model, tmp, extra=("--n_threads", str(args.threads), "--flash_attn", "True"))
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    rows: list[dict] = []
    loop = asyncio.new_event_loop()
    try:
        client = loop.run_until_complete(_client(server.url))

        def one(who: str) -> dict:
            prompt = pr.decode_prompt(pr.nonce())
            c0, s0 = time.process_time(), server_cpu(server.proc.pid)
            if who == "oracle":
                ts = oc.stream(
                    server.port, oc.chat_body(prompt, args.n, min_tokens=args.n, ignore_eos=True)
                ).chunk_t
            else:
                req = StreamRequest(
                    prompt=prompt,
                    max_tokens=args.n,
                    model="tiny",
                    min_tokens=args.n,
                    ignore_eos=True,
                    timeout=120,
                )
                ts = loop.run_until_complete(client.stream(req)).chunk_t
            c1, s1 = time.process_time(), server_cpu(server.proc.pid)
            if len(ts) != args.n:
                raise RuntimeError(f"{who}: {len(ts)} chunks, expected {args.n}")
            gaps = sorted((b - a) / 1e6 for a, b in zip(ts, ts[1:], strict=False))
            return {
                "who": who,
                "tps": (len(ts) - 1) * NS / (ts[-1] - ts[0]),
                "client_ms": (c1 - c0) * 1e3,
                "server_ms": (s1[0] - s0[0]) * 1e3,
                "vol": s1[1] - s0[1],
                "invol": s1[2] - s0[2],
                "gap_med": gaps[len(gaps) // 2],
                "gap_max": gaps[-1],
            }

        for who in ("oracle", "labkit"):  # first-use allocations on both sides
            one(who)
        for i in range(args.pairs):
            for who in ("labkit", "oracle") if i % 2 == 0 else ("oracle", "labkit"):
                rows.append(one(who))
        loop.run_until_complete(client.aclose())
    finally:
        loop.close()
        if hog is not None:
            hog.kill()
            hog.wait()
        server.stop()
    evals = [
        float(m[0]) / float(m[1])
        for m in re.findall(r"\s eval time =\s+([\d.]+) ms /\s+(\d+) runs", server.stderr_text())
    ][-len(rows) :]
    for r, e in zip(rows, evals, strict=False):
        r["engine_ms_tok"] = e
    print(
        f"tiny-llamacpp {args.model}, --n_threads {args.threads}, hog={'yes' if args.hog else 'no'}, "
        f"{args.pairs} pairs of {args.n}-token streams; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    med = statistics.median
    for who in ("labkit", "oracle"):
        xs = [r for r in rows if r["who"] == who]
        t = sorted(r["tps"] for r in xs)
        print(
            f"  {who:6s} decode t/s {med(t):7.1f} ({t[0]:.0f}-{t[-1]:.0f}) | client CPU {med(r['client_ms'] for r in xs):5.1f} ms"
            f" | server CPU {med(r['server_ms'] for r in xs):5.0f} ms, ctx sw vol {med(r['vol'] for r in xs):5.0f}"
            f" invol {med(r['invol'] for r in xs):5.0f} | gap med {med(r['gap_med'] for r in xs):.2f} max"
            f" {med(r['gap_max'] for r in xs):.2f} ms | engine eval {med(r.get('engine_ms_tok', 0) for r in xs):.3f} ms/token"
        )
    print("  samples in order:", " ".join(f"{r['who'][0]}{r['tps']:.0f}" for r in rows))
    return 0


async def _client(url: str) -> StreamClient:
    return StreamClient(url, timeout=120)  # built inside the loop that uses it


if __name__ == "__main__":
    sys.exit(main())
