"""Prefill under decode, the recipe half (`[measure.interference]`): running streams decode while prompts arrive,
as recipe fields, the cross-key rule against the engine's window and running cap, the frozen plan and its line
(docs/measurement.md, "Prefill under decode").

Kept apart from measureplan.py so the workload reads as one idea: its keys, their defaults, what the engine must
hold, the dataclass and its line; it ends in its table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import labkit.recipe.schema as s
from labkit.measures import measure_key
from labkit.recipe.depthplan import MAX_DEPTH, context_window
from labkit.recipe.loadplan import running_cap
from labkit.recipe.measureplan import MeasurePlan, Rows, WorkloadTable

# the measures one arriving prompt length gives (labkit/measure/summary/interference.py)
INTERFERENCE_MEASURES = ("ttft", "ttft_max", "stall", "gap_before", "gap_after", "gap_max", "itl_p99")
STREAM_PROMPT_TOKENS = 64  # each running stream's own prompt, about


@dataclass(frozen=True)
class InterferencePlan:
    """Per arriving prompt length P: `streams` streams each decode `stream_tokens` forced tokens; once every
    one has passed `warm_tokens`, `arrivals` prompts of P new tokens arrive `spacing_s` apart, each asking for
    one token. With `context_tokens` D, each arrival's P new tokens follow a context of D tokens that one request
    put in the prefix cache before the window (an agent's next turn: its conversation cached, its new part not);
    without, the P tokens are the whole prompt, uncached. Their TTFT and the running streams' gaps are measured
    in one window per P."""

    prompt_tokens: tuple[int, ...]
    streams: int = 2
    stream_tokens: int = 512
    warm_tokens: int = 32
    arrivals: int = 3
    spacing_s: float = 1.0
    context_tokens: int = 0

    def requests(self) -> int:
        """Requests of one repetition: the streams, the arrivals and, with a context, its load, per prompt
        length."""
        return (self.streams + self.arrivals + bool(self.context_tokens)) * len(self.prompt_tokens)


def interference_fields() -> dict[str, s.Field]:
    """[measure.interference]'s keys; `prompt_tokens` is required (an empty table would measure nothing)."""
    F = s.Field
    return {
        "prompt_tokens": F(s.array(s.integer(16, MAX_DEPTH), nonempty=True, unique=True), required=True),
        "streams": F(s.integer(1, 256), default=2),
        "stream_tokens": F(s.integer(16, 1_048_576), default=512),
        "warm_tokens": F(s.integer(1, 65536), default=32),
        "arrivals": F(s.integer(1, 64), default=3),
        "spacing_s": F(s.number(0.01), default=1.0),
        "context_tokens": F(s.integer(0, MAX_DEPTH), default=0),
    }


def interference_plan(table: dict) -> InterferencePlan:
    """The checked [measure.interference] table as a plan."""
    return InterferencePlan(
        tuple(table["prompt_tokens"]),
        table["streams"],
        table["stream_tokens"],
        table["warm_tokens"],
        table["arrivals"],
        float(table["spacing_s"]),
        table["context_tokens"],
    )


def check_interference(merged: dict) -> None:
    """The streams pass their warm-up before they end; the streams and one arrival run at once within the
    engine's cap on running requests (else the arrival would queue behind them, and its TTFT would be a wait,
    not a prefill beside decodes); a stream and an arrival each fit the context window."""
    table = merged["measure"].get("interference")
    if not table:
        return
    if table["warm_tokens"] >= table["stream_tokens"]:
        raise s.Invalid(
            "measure.interference.warm_tokens",
            f"{table['warm_tokens']} must be below stream_tokens ({table['stream_tokens']}): the prompts "
            "arrive once every stream has passed it, while they still decode",
        )
    args: Mapping[str, Any] = merged["engine"]["args"]
    cap = running_cap(args)
    if cap is not None and table["streams"] + 1 > cap[1]:
        raise s.Invalid(
            "measure.interference.streams",
            f"{table['streams']} streams and an arriving prompt are {table['streams'] + 1} running requests, over "
            f"the engine's cap of {cap[1]} (engine.args {cap[0]}): the prompt would wait for a stream to end",
        )
    window = context_window(args)
    if window is None:
        return
    context = table["context_tokens"]
    for i, tokens in enumerate(table["prompt_tokens"]):
        if context + tokens + 1 > window[1]:
            held = f"{context:,} cached context tokens + " if context else ""
            raise s.Invalid(
                f"measure.interference.prompt_tokens[{i}]",
                f"{held}{tokens:,} prompt tokens + 1 answer token, over the context window of {window[1]:,} "
                f"(engine.args {window[0]})",
            )
    need = STREAM_PROMPT_TOKENS + table["stream_tokens"]
    if need > window[1]:
        raise s.Invalid(
            "measure.interference.stream_tokens",
            f"a stream's ~{STREAM_PROMPT_TOKENS}-token prompt + {table['stream_tokens']:,} answer tokens = "
            f"{need:,}, over the context window of {window[1]:,} (engine.args {window[0]})",
        )


def _rows(p: InterferencePlan, m: MeasurePlan) -> Rows:
    lengths = ", ".join(f"{n:,}" for n in p.prompt_tokens)
    what = f"new tokens after {p.context_tokens:,} cached" if p.context_tokens else "tokens"
    return [
        (
            "interference",
            f"{p.streams} streams decode {p.stream_tokens} tokens; past {p.warm_tokens} each, {p.arrivals} "
            f"prompts of {lengths} {what} arrive {p.spacing_s:g} s apart (their TTFT, the streams' stall)",
        )
    ]


def _targets(table: dict) -> set[str]:
    return {
        measure_key(f"interference_<P>_{m}", prompt=tokens)
        for tokens in table["prompt_tokens"]
        for m in INTERFERENCE_MEASURES
    }


INTERFERENCE_TABLE = WorkloadTable[InterferencePlan](
    key="interference",
    field=lambda partial: s.Field(s.table(interference_fields(), partial=partial)),
    plan=interference_plan,
    rows=_rows,
    rule=check_interference,
    targets=_targets,
)
