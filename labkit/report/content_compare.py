"""By prompt content: for each category both sides measured, whether the two lanes' acceptance explains their
decode speed difference (docs/compare.md, "By prompt content").

decode c1 = τ (tokens per engine step) × r (engine steps per second of one stream), so on log scale a decode
difference is the acceptance's part plus the per-step part. Per run, r = decode_c1@<C> / accept_length@<C>;
the two sides' r are compared like any measure (Welch, or paired on shared prompt seeds), and the share of
the log decode difference that acceptance accounts for is ln(τ_B/τ_A) / ln(decode_B/decode_A). When B decodes
significantly faster or slower: explained when r shows no detectable difference and the share is at least
EXPLAINS, or when r moved the other way (share ≥ 1); partly explained when the share is between; not
explained when τ does not move with decode (share ≤ 0). Pure: the comparison's decode rows and the sides' stored runs in, one reading per category out.
These are explanations of verdicts already made (the decode rows, Holm-corrected), not verdicts of their
own, so they are not in the family.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from labkit.measures import CONTENT, content_key
from labkit.report.compare import ALPHA, FASTER, SLOWER, TOO_FEW, MeasureComparison, compare_values
from labkit.store import StoredRun

EXPLAINED, PARTLY, NOT_EXPLAINED = (
    "explained by acceptance",
    "partly explained by acceptance",
    "not explained by acceptance",
)
NO_SPEED_DIFFERENCE = "no speed difference to explain"
NO_ACCEPTANCE = "no acceptance on both sides"  # a lane without speculation has no τ
EXPLAINS = 0.5  # without a detectable per-step difference, acceptance explains a share at least this large


@dataclass(frozen=True)
class ContentReading:
    """One category: the decode and τ ratios B/A (of the means), the per-step rates' comparison, the share of
    the log decode difference that acceptance accounts for, and the reading with why."""

    category: str
    decode: str  # the decode row's verdict
    decode_ratio: float | None
    tau_ratio: float | None
    step: MeasureComparison | None
    share: float | None
    reading: str
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "decode": self.decode,
            "decode_ratio": self.decode_ratio,
            "tau_ratio": self.tau_ratio,
            "step_ratio": _ratio(self.step.mean_b, self.step.mean_a) if self.step else None,
            "step_p": self.step.p if self.step else None,
            "share": self.share,
            "reading": self.reading,
            "why": self.why,
        }


def _ratio(b: float | None, a: float | None) -> float | None:
    return None if a is None or b is None or a <= 0 or b <= 0 else b / a


def step_rates(docs: Sequence[StoredRun], category: str) -> list[float | None]:
    """Per run, in the order given: decode_c1@<C> / accept_length@<C>, engine steps per second (None
    without both)."""
    out: list[float | None] = []
    for doc in docs:
        m = doc.summary.measures
        d, tau = m.get(content_key("decode_c1", category)), m.get(content_key("accept_length", category))
        out.append(d / tau if d is not None and tau and tau > 0 else None)
    return out


def _mean(docs: Sequence[StoredRun], key: str) -> float | None:
    vals = [d.summary.measures.get(key) for d in docs]
    got = [v for v in vals if v is not None and math.isfinite(v)]
    return sum(got) / len(got) if got else None


def readings(
    rows: Sequence[MeasureComparison],
    a: Sequence[StoredRun],
    b: Sequence[StoredRun],
    *,
    paired: bool,
    margin: float,
) -> list[ContentReading]:
    """A reading per category whose decode_c1@<C> the comparison tested; `a` and `b` are the sides' stored
    runs, in seed order when `paired` (run i of A and of B saw the same prompts)."""
    decode = {r.measure: r for r in rows}
    out = []
    for category in CONTENT:
        row = decode.get(content_key("decode_c1", category))
        if row is None:
            continue
        tau_ratio = _ratio(
            _mean(b, content_key("accept_length", category)), _mean(a, content_key("accept_length", category))
        )
        decode_ratio = _ratio(row.mean_b, row.mean_a)
        if tau_ratio is None or decode_ratio is None:
            why = f"{content_key('accept_length', category)} is not in both sides' runs (or decode c1 has no mean)"
            out.append(
                ContentReading(category, row.verdict, decode_ratio, None, None, None, NO_ACCEPTANCE, why)
            )
            continue
        step = compare_values(
            f"{content_key('decode_c1', category)} / {content_key('accept_length', category)}",
            step_rates(a, category),
            step_rates(b, category),
            pairs=paired,
            margin=margin,
        )
        share = math.log(tau_ratio) / math.log(decode_ratio) if decode_ratio != 1 else None
        out.append(_read(category, row, decode_ratio, tau_ratio, step, share))
    return out


def _read(
    category: str,
    row: MeasureComparison,
    decode_ratio: float,
    tau_ratio: float,
    step: MeasureComparison,
    share: float | None,
) -> ContentReading:
    said = f"decode ×{decode_ratio:.3g} ({row.verdict}), τ ×{tau_ratio:.3g}"
    step_ratio = _ratio(step.mean_b, step.mean_a)
    steps = f"steps per second ×{step_ratio:.3g}" if step_ratio is not None else "steps per second —"

    def reading(what: str, why: str) -> ContentReading:
        return ContentReading(category, row.verdict, decode_ratio, tau_ratio, step, share, what, why)

    if row.verdict not in (FASTER, SLOWER):
        return reading(NO_SPEED_DIFFERENCE, f"{said}: decode c1 shows no significant difference")
    if step.p is None:
        return reading(TOO_FEW, f"{said}; {steps}: {step.why}")
    part = f"acceptance accounts for {share * 100:.0f} % of it on log scale" if share is not None else ""
    if share is None or share <= 0:
        return reading(NOT_EXPLAINED, f"{said}; {steps} (p {step.p:.2g}): τ does not move with decode")
    if step.p >= ALPHA:  # no detectable per-step difference: acceptance, if it carries at least half of it
        how = "equivalent within the margin" if step.equivalent else "no detectable difference"
        if share >= EXPLAINS:
            return reading(EXPLAINED, f"{said}; {steps}, {how} (p {step.p:.2g}): {part}")
        return reading(PARTLY, f"{said}; {steps}, {how} (p {step.p:.2g}), yet {part}")
    if share >= 1:
        return reading(EXPLAINED, f"{said}; {steps} (p {step.p:.2g}) the other way: {part}")
    return reading(PARTLY, f"{said}; {steps} (p {step.p:.2g}) as well: {part}, the per-step speed the rest")
