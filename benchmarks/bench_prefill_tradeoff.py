"""What a token budget trades, measured: a sweep over `--max-num-batched-tokens` with prefill under decode, on
the simulator (whose truth is known: each prefill token costs 1 / prefill_tps of every stream's time, so the
stall per arrival is the same at any budget while the longest gap and the arrival's TTFT move) and, when the
vLLM CPU build is installed, on the tiny-vllm lane (what a real chunked-prefill scheduler does).

Each lane's table is printed, then, against the largest budget measured in the same run, each point's ratio of
arrival TTFT, longest stream gap and stall. Nothing is gated: a direction on the real engine is reported, not
asserted (docs/measurement.md, "Prefill under decode"; docs/sweeps.md, "The trade-off plot").

    .venv/bin/python benchmarks/bench_prefill_tradeoff.py [--sim-only]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tabulate import tabulate  # noqa: E402

from labkit import lab, report  # noqa: E402
from labkit.store import load_results  # noqa: E402
from tests.support.lanes import sim_recipe  # noqa: E402
from tests.support.vllm import vllm_available  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MNBT = 'engine.args."--max-num-batched-tokens"'
FIGURES = ("ttft", "gap_max", "stall")


def _interference(prompt: int, stream_tokens: int, spacing: float) -> str:
    return (
        f"interference = {{ prompt_tokens = [{prompt}], streams = 2, stream_tokens = {stream_tokens}, "
        f"warm_tokens = 8, arrivals = 3, spacing_s = {spacing} }}"
    )


def _tiny_vllm(folder: Path) -> None:
    """The shipped tiny-vllm recipe with a one-turn decode, no prefill plan and the interference workload."""
    text = (REPO / "recipes" / "tiny-vllm" / "recipe.toml").read_text()
    text = re.sub(r"^decode = .*$", "decode = { concurrency = [1], turns = 1, output_tokens = 16, warmup = 0 }",
                  text, flags=re.M)  # fmt: skip
    text = re.sub(r"^prefill = .*$", "prefill = { prompt_tokens = [512], repeats = 1 }", text, flags=re.M)
    text = text.replace("[measure]\n", "[measure]\n" + _interference(2048, 512, 0.5) + "\n", 1)
    folder.mkdir(parents=True)
    (folder / "recipe.toml").write_text(text)


def _ratios(results: Path, recipe: str, prompt: int, budgets: tuple[int, ...]) -> list[list[str]]:
    """Per budget: each figure's median over runs and its ratio to the largest budget's."""
    m = load_results(results).measures
    rows = []

    def value(budget: int, figure: str) -> float | None:
        part = m[(m["recipe"] == recipe) & m["variant"].str.endswith(f"mnbt-{budget}")]
        part = part[part["measure"] == f"interference_{prompt}_{figure}"]
        return float(part["value"].median()) if len(part) else None

    top = max(budgets)
    for b in budgets:
        row = [str(b)]
        for f in FIGURES:
            v, ref = value(b, f), value(top, f)
            row.append("—" if v is None else f"{v:.4f}" + (f" ({v / ref:.2f}x)" if ref else ""))
        rows.append(row)
    return rows


def _sweep(recipe: str, budgets: tuple[int, ...], results: Path, prompt: int) -> None:
    over = f"{MNBT}={','.join(map(str, budgets))}"
    sw = lab.sweep(recipe, over, results=results, progress=False)
    for table in lab.sweep_tables(sw):
        print(report.to_text(table), end="\n\n")
    headers = ["--max-num-batched-tokens", *(f"{f} (s; ratio to {max(budgets)})" for f in FIGURES)]
    print(tabulate(_ratios(results, recipe, prompt, budgets), headers=headers), end="\n\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sim-only", action="store_true", help="skip the vLLM CPU lane")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="labkit-tradeoff-") as tmp:
        root = Path(tmp)
        os.environ["LABKIT_RECIPES"] = str(root / "recipes")
        sim = {"decode_tps": 200, "prefill_tps": 20000, "batch_beta": 0.5}
        sim_recipe(root / "recipes" / "tradeoff-sim", port=18870, settings=sim,
                   measure=_interference(2000, 400, 0.5))  # fmt: skip
        print("== the simulator (known truth: stall = 2 x ~2,000 / 20,000 t/s = ~0.2 s at every budget)\n")
        _sweep("tradeoff-sim", (256, 1024, 8192), root / "results", 2000)
        why = vllm_available()
        if args.sim_only or why:
            print(f"== tiny-vllm: skipped ({'--sim-only' if args.sim_only else why})")
            return 0
        _tiny_vllm(root / "recipes" / "tradeoff-vllm")
        print("== tiny-vllm (vLLM CPU build, 2,048-token arrivals beside two streams)\n")
        _sweep("tradeoff-vllm", (256, 1024, 4096), root / "results", 2048)
    return 0


if __name__ == "__main__":
    sys.exit(main())
