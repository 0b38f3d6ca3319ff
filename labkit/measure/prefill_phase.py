"""The prefill phase of a Bench's plan: per target length, prompts fitted to it in server tokens (to the token
when the server counts them), a warmup, then the samples at c1 with max_tokens=1, each between two /metrics
scrapes (its prefix-cache hits and the engine's own view of it).

The functions take the `Bench` being run (labkit/measure/runner.py): they set its prompt-length counter and
RTT, and add to its records, prefix-cache window and evidence log (window `prefill_<P>`; docs/measurement.md,
"Per-run evidence").
"""

from __future__ import annotations

from labkit.measure import prompts as pr
from labkit.measure.scrapes import COUNTER_RESET, prefix_cache_sample, server_view
from labkit.measure.tokencount import make_counter


async def measure_prefill(bench, run: int) -> None:
    """Per target length: fitted prompts, a warmup, then the samples, each between two /metrics scrapes."""
    await _fit_counter(bench)
    bench.rtt_ns = await bench.c.rtt_ns()
    p = bench.plan.prefill
    for target in p.prompt_tokens:
        warm = min(bench.plan.decode.warmup, 1)
        for i in range(warm + p.repeats):
            await _sample(bench, run, target, i, warm)


async def _fit_counter(bench) -> None:
    """Choose how prompt lengths are counted in server tokens (labkit/measure/tokencount.py)."""
    if bench.counter is None:
        bench.counter, bench.counter_kind = await make_counter(bench.c, bench.model or "", bench.api)


async def _sample(bench, run: int, target: int, i: int, warm: int) -> None:
    """Request `i` at `target` prompt tokens (the first `warm` are warmups, kept out of the cache window)."""
    exact = bench.counter_kind.startswith("server ")  # the server's own count: fit to the token
    seed = bench.text_seed(f"prefill.{target}.{i}")
    prompt, counted, n = await pr.fit_prompt(target, bench.counter, exact=exact, seed=seed)
    key = f"prefill.{target}.{run}.{i}"
    before = await bench.scrape(key + ".before")
    res = await bench.c.stream(bench.stream_request(prompt, 1, forced=True))
    after = await bench.scrape(key + ".after")
    learn = getattr(bench.counter, "add", None)
    if learn is not None and res.prompt_tokens is not None:
        learn(prompt, res.prompt_tokens)  # a fitted counter improves with every server count
    rec = bench.record(
        res,
        phase="warmup" if i < warm else "prefill",
        requested=1,
        turn=i - warm,
        nonce=n,
        prompt_target=target,
        counted=counted,
    )
    reset = bench.evidence.pair(f"prefill_{target}", run, before, after, 1)
    if reset:
        rec.flags = "; ".join(filter(None, [rec.flags, f"{COUNTER_RESET} ({reset})"]))
        return  # a restart inside the sample: no cache delta, no engine view, and no prefill figure
    server_view([rec], before, after)
    pc = prefix_cache_sample(rec, before, after)
    if pc is not None and i >= warm:
        bench.pc_window.append(pc)
