"""The content measures of a run's summary: per prompt content category, decode c1 and TTFT over its turns
and the acceptance of its own windows, each key suffixed with the category (`decode_c1@code`;
docs/measurement.md, "Prompt content").

Pure: the content turns' records and each category's acceptance in, measures written onto the RunSummary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from labkit.measure.records import RequestRecord, RunSummary
from labkit.measure.request.recording import BURST_FLAG
from labkit.measure.server import metrics as mx
from labkit.measure.summary.counters import acceptance_figures
from labkit.measure.summary.speed import DECODE_WINDOW, put
from labkit.measures import CONTENT_MARK, content_key

# the acceptance figures a category gets (K is the engine's, the same for every category; no per-position rates)
CONTENT_ACCEPTANCE = (
    "accept_per_draft",
    "accept_length",
    "accept_length_stream",
    "accept_proposed_per_draft",
    "accept_drafted_share",
    "accept_rate",
)


def content_measures(
    s: RunSummary,
    ok: Sequence[RequestRecord],
    categories: Sequence[str],
    acceptance: Mapping[str, mx.Acceptance],
    src: str,
) -> None:
    """Per category of the plan: decode_c1@<c> (burst-read turns excluded, noted) and ttft_c1@<c> over its
    turns, and its windows' acceptance as accept_*@<c>, the raw deltas as counters with the same suffix."""
    for category in categories:
        turns = [r for r in ok if r.phase == "content" and r.content == category]
        clean = [r for r in turns if BURST_FLAG not in r.flags]
        where = f"c1 turns on the {category} prompts of the corpus"
        put(
            s,
            content_key("decode_c1", category),
            [r.decode_tps for r in clean],
            f"median over the {where}; {DECODE_WINDOW}; tokens: {src}",
        )
        put(
            s,
            content_key("ttft_c1", category),
            [r.ttft_s for r in turns],
            f"median t_first - t_send over the {where}, seconds",
        )
        if len(clean) < len(turns):
            s.notes.append(
                f"{content_key('decode_c1', category)}: {len(turns) - len(clean)} burst-read turn(s) excluded"
            )
        a = acceptance.get(category)
        if a is None:
            continue
        figures = acceptance_figures(a, f" over the windows of the {where}")
        for key in CONTENT_ACCEPTANCE:
            value, how = figures[key]
            if value is not None:
                s.measures[content_key(key, category)] = value
                s.method[content_key(key, category)] = how
        for key, v in (("spec_accepted", a.accepted), ("spec_drafts", a.drafts), ("spec_steps", a.steps)):
            if v is not None:
                s.counters[f"{key}{CONTENT_MARK}{category}"] = v  # a counter, no catalogue key
