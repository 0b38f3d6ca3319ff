"""Does `labkit bench` measure a real engine right? labkit vs an independent plain-HTTP client on llama.cpp.

Issue 8's bound: on the tiny-llamacpp lane (llama-cpp-python serving labkit's tiny GGUF on this CPU),
labkit's decode c1 and prefill t/s agree with the oracle client of tests/support/llamacpp.py within 5%,
comparing medians over interleaved rounds (labkit first in even rounds, the oracle first in odd ones), so
drift of the machine (other load, clocks) hits both alike. The oracle is plain `http.client`, stamps each
SSE line as `readline` returns it and counts non-empty content chunks; the engine's own `eval time` is not
comparable (on a tiny model the server's streaming overhead dominates the wall time).

    /work/venv/bin/python benchmarks/bench_llamacpp_agreement.py [--quick] [--json OUT]

Exit status 1 if a bound is missed, 2 if llama_cpp is not installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tabulate import tabulate  # noqa: E402

from labkit import tinymodel  # noqa: E402
from labkit.measure import BenchOptions, run_bench  # noqa: E402
from labkit.measure.prompt import prompts as pr  # noqa: E402
from labkit.measures import decode_key, prefill_key  # noqa: E402
from labkit.recipe import DecodePlan, MeasurePlan, PrefillPlan
from labkit.recipe.lookup import load_plan
from labkit.serve import Lane  # noqa: E402
from labkit.store import RunFolderSink
from tests.support import llamacpp as oc  # noqa: E402

BOUND = 0.05


def _range(xs: list[float]) -> str:
    return f"{oc.median(xs):.1f} ({min(xs):.1f}\u2013{max(xs):.1f}) n={len(xs)}"


def oracle_round(
    port: int, overhead: int, turns: int, n: int, lengths: tuple[int, ...], out: dict[str, list[float]]
) -> None:
    """The same request shapes and prompt text as labkit's plan; counting, timing and formulas are the
    oracle's own (prompt sized with the server's /extras/tokenize/count plus the chat-template overhead)."""
    for _ in range(turns):
        # Same body as labkit's forced-length request: min_tokens adds a logits processor in the server.
        res = oc.stream(port, oc.chat_body(pr.decode_prompt(pr.nonce()), n, min_tokens=n, ignore_eos=True))
        assert res.n == n and res.finish_reason == "length", (res.n, res.finish_reason, res.error)
        out["decode_c1"].append(res.decode_tps)
    for target in lengths:
        nonce = pr.nonce()
        prompt, counted = oc.fitted_words(port, target - overhead, lambda w, x=nonce: pr.prefill_prompt(x, w))
        res = oc.stream(port, oc.chat_body(prompt, 1, min_tokens=1, ignore_eos=True))
        assert res.n == 1, (res.status, res.error)
        out[prefill_key(target)].append(res.prefill_tps(counted + overhead))


def labkit_round(
    url: str, model: str, turns: int, n: int, lengths: tuple[int, ...], out: dict[str, list[float]]
) -> None:
    dec = MeasurePlan("chat", 1, DecodePlan((1,), turns, n, 1), PrefillPlan((), 1), 120.0)
    # the tiny random model loops by nature (model.loops): loops are reported, never gating its figures
    opts = BenchOptions(model=model, cold_expected=False, progress=False, prefill=False, loops_expected=True)
    r = run_bench(url, dec, opts)
    out["decode_c1"] += r.summary.samples["decode_c1"]
    if lengths:
        pre = MeasurePlan("chat", 1, DecodePlan((1,), 1, n, 0), PrefillPlan(lengths, 1), 120.0)
        r = run_bench(url, pre, dataclasses.replace(opts, prefill=True, decode=False))
        for target in lengths:
            out[prefill_key(target)] += r.summary.samples[prefill_key(target)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="8 rounds and the small model (CI); default 20 rounds"
    )
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--turns", type=int, default=3, help="decode requests per side per round")
    ap.add_argument(
        "--size", choices=["default", "small"], help="recipe size variant (--quick: small, faster)"
    )
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    if not oc.have_llama_cpp():
        print("llama_cpp is not importable: pip install -e '.[llamacpp]'", file=sys.stderr)
        return 2
    rounds = args.rounds or (8 if args.quick else 20)
    turns, n, lengths = args.turns, 128, (4096, 12600)  # many small rounds: fine interleaving beats drift
    tmp = Path(tempfile.mkdtemp(prefix="labkit-agree-"))
    os.environ.setdefault("LABKIT_STATE_DIR", str(tmp / "state"))
    os.environ.setdefault("LABKIT_CACHE", str(tmp / "cache"))
    plan = load_plan("tiny-llamacpp", size=args.size or ("small" if args.quick else "default"))
    plan = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, port=oc.free_port()))
    plan = tinymodel.materialize(plan, log=sys.stderr)  # the recipe's model is one labkit builds
    lane = Lane(plan, sink=RunFolderSink(tmp / "run"), poll=0.1, stop_grace=5)
    keys = [decode_key(1)] + [prefill_key(t) for t in lengths]
    got: dict[str, dict[str, list[float]]] = {
        "labkit": {k: [] for k in keys},
        "oracle": {k: [] for k in keys},
    }
    paired: dict[str, list[float]] = {k: [] for k in keys}  # per round: labkit median / oracle median
    with lane.up() as ep:
        port = plan.engine.port
        overhead = oc.chat_overhead(port)
        # One request of each shape first, so neither side pays for first-use allocations.
        oracle_round(port, overhead, 1, n, lengths, {k: [] for k in keys})
        for i in range(rounds):
            order = ("labkit", "oracle") if i % 2 == 0 else ("oracle", "labkit")
            this: dict[str, dict[str, list[float]]] = {}
            for who in order:
                print(f"round {i + 1}/{rounds}: {who}", file=sys.stderr, flush=True)
                this[who] = {k: [] for k in keys}
                if who == "labkit":
                    labkit_round(ep.base_url, ep.model, turns, n, lengths, this[who])
                else:
                    oracle_round(port, overhead, turns, n, lengths, this[who])
                for k in keys:
                    got[who][k] += this[who][k]
            for k in keys:
                paired[k].append(oc.median(this["labkit"][k]) / oc.median(this["oracle"][k]))
    rows, report, failed = [], {}, False
    for k in keys:
        lab, ora = got["labkit"][k], got["oracle"][k]
        ratio = oc.median(lab) / oc.median(ora)
        ok = abs(ratio - 1) <= BOUND
        failed |= not ok
        rows.append(
            [
                k,
                _range(lab),
                _range(ora),
                f"{ratio:.3f}",
                f"{oc.median(paired[k]):.3f}",
                f"\u00b1{BOUND:.0%}",
                "ok" if ok else "MISSED",
            ]
        )
        report[k] = {"labkit": lab, "oracle": ora, "ratio": ratio, "paired_ratios": paired[k], "ok": ok}
    load = os.getloadavg()
    print(
        f"tiny-llamacpp ({plan.variant_id}), {rounds} interleaved rounds; t/s, median (min\u2013max); oracle = plain http.client; "
        f"load average {load[0]:.1f} on {os.cpu_count()} CPUs (a busy machine widens both ranges)"
    )
    print(
        tabulate(
            rows, headers=["measure", "labkit", "oracle", "labkit/oracle", "paired (median)", "bound", ""]
        )
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"rounds": rounds, "bound": BOUND, "loadavg": load, "measures": report}, indent=1)
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
