"""The roofline as people read it: bytes per decode step by part and the ceiling they set, per case (c1, c2,
with and without speculation), as `labkit show` prints it and docs/roofline.md's worked example holds it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tabulate import tabulate

from labkit.roofline.checkpoint import Checkpoint
from labkit.roofline.devices import Rate
from labkit.roofline.step import Parallel, StepInputs, ceiling, decode_step

# draft-model forward passes per step by speculative method: a block drafter (DSpark) drafts its K tokens in
# one pass of its stages; a chain drafter (MTP, EAGLE) one pass per draft token; prompt lookup reads no weights
ONE_PASS = ("dspark",)
NO_WEIGHTS = ("ngram", "suffix")
PART_LABELS = {
    "dense": "dense (attention, norms, gates)",
    "shared": "shared experts",
    "routed": "routed experts",
    "embedding": "embedding rows",
    "head": "output head",
    "kv": "KV cache",
    "draft": "draft heads, dense",
    "draft_routed": "draft heads, experts",
}


@dataclass(frozen=True)
class Case:
    """One step shape to show: its sequences, positions per sequence (K + 1 with speculation), the tokens a
    sequence keeps per step (1, or tau), and the draft passes."""

    label: str
    sequences: int
    positions: int = 1
    tau: float = 1.0
    draft_passes: int = 0


def draft_passes(method: str | None, k: int) -> int:
    """Forward passes of the draft heads per step for a speculative `method` with K draft tokens."""
    name = (method or "").lower()
    if any(m in name for m in NO_WEIGHTS):
        return 0
    return 1 if any(m in name for m in ONE_PASS) else k


def cases(
    concurrency: Sequence[int], k: int | None, method: str | None, tau: float | None = None
) -> list[Case]:
    """c1 and c2 (or the given levels) plain, and with K draft tokens at tau (K + 1, the bound, when no
    measured tau is given)."""
    out = [Case(f"c{c}", c) for c in concurrency]
    if k:
        kept = tau if tau is not None else k + 1.0
        name = f"K{k} τ={kept:.2f}" if tau is not None else f"K{k} τ≤{k + 1}"
        out += [Case(f"c{c} {name}", c, k + 1, kept, draft_passes(method, k)) for c in concurrency]
    return out


def _gb(x: float) -> str:
    return f"{x / 1e9:,.3f}"


def table(
    ck: Checkpoint,
    par: Parallel,
    shown: Sequence[Case],
    context: int,
    memory: Rate,
    fabric: Rate | None,
) -> str:
    """The bytes-per-step table and the ceilings, with the figures' sources above and the caveats below."""
    steps = [
        decode_step(ck.placed, ck.shape, StepInputs(c.sequences, c.positions, context, c.draft_passes))
        for c in shown
    ]
    ceils = [
        ceiling(s, ck.shape, par, memory.bytes_per_s, fabric.bytes_per_s if fabric else None, c.tau)
        for s, c in zip(steps, shown, strict=True)
    ]
    rows: list[list[str]] = []
    for part, label in PART_LABELS.items():
        if any(s.parts[part] for s in steps):
            rows.append([f"{label}, GB", *(_gb(s.parts[part]) for s in steps)])
    rows += [
        ["read per step, GB", *(_gb(s.total) for s in steps)],
        ["per GPU, GB", *(_gb(c.gpu_bytes) for c in ceils)],
        ["fabric per GPU, MB", *(f"{c.fabric_bytes / 1e6:,.2f}" for c in ceils)],
        ["step: memory + fabric, ms", *(f"{c.serial_s * 1e3:,.2f}" for c in ceils)],
        ["step: the larger, ms", *(f"{c.overlapped_s * 1e3:,.2f}" for c in ceils)],
        ["tokens per step", *(f"{c.tokens_per_step:g}" for c in ceils)],
        ["ceiling, t/s", *(f"{c.tps:,.1f}" for c in ceils)],
        ["ceiling overlapped, t/s", *(f"{c.tps_overlapped:,.1f}" for c in ceils)],
    ]
    head = [
        f"roofline from {ck.digest.source}",
        f"  memory {memory.gb_s:g} GB/s per GPU ({memory.source}); "
        + (f"fabric {fabric.gb_s:g} GB/s ({fabric.source})" if fabric else "no fabric: one GPU"),
        f"  TP{par.tp}{f' EP{par.ep}' if par.ep > 1 else ''} over {par.gpus} GPU{'s' if par.gpus > 1 else ''}; "
        f"KV at {context:,} tokens of context ({ck.shape.kv_note})",
    ]
    body = tabulate(
        rows,
        headers=["", *(c.label for c in shown)],
        disable_numparse=True,
        colalign=("left", *("right",) * len(shown)),
    )
    foot = []
    if ck.shape.engram_rows_per_token:
        per = steps[0].engram / max(steps[0].inputs.tokens, 1)
        foot.append(
            f"  Engram table rows: {per / 1e3:,.1f} KB per token, read from disk or the NAS, not GPU memory"
        )
    if ck.shape.routed_experts:
        foot.append("  routed experts under uniform routing: real routing touches fewer (docs/roofline.md)")
    foot += [f"  {n}" for n in dict.fromkeys(n for s in steps for n in s.notes)]
    return "\n".join([*head, body, *foot])
