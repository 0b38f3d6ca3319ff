"""What a lane measures: the decode and prefill shapes, the repetitions, and the measures a target CI covers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from labkit.measures import content_key, decode_key, headline, prefill_key
from labkit.recipe.canaryplan import CanaryPlan
from labkit.recipe.depthplan import DepthPlan
from labkit.recipe.sessionplan import AgenticPlan

Api = Literal["chat", "completions"]  # the OpenAI endpoint a lane's requests go to (measure.api)
TARGET_MAX_RUNS = 10  # measure.max_runs when target_ci is set without it


@dataclass(frozen=True)
class DecodePlan:
    concurrency: tuple[int, ...]
    turns: int
    output_tokens: int
    warmup: int


@dataclass(frozen=True)
class PrefillPlan:
    prompt_tokens: tuple[int, ...]
    repeats: int


@dataclass(frozen=True)
class MeasurePlan:
    api: Api
    runs: int
    decode: DecodePlan
    prefill: PrefillPlan
    timeout: float
    target_ci: float | None = None  # relative half-width of the 95 % interval to repeat until
    max_runs: int | None = None  # cap on repetitions when target_ci is set
    target_measures: tuple[str, ...] = ()  # the measures target_ci applies to; () = the headline ones
    seed: int | None = None  # shared prompt seed: repetition i draws its prompt texts from "<seed>/<i>"
    telemetry_period: float = 1.0  # seconds between node telemetry samples; 0 = none (docs/measurement.md)
    clock_drop: float = 0.10  # a window's SM clock this fraction below the node's baseline is flagged
    # content categories measured after the decode phase (c1 on the pinned corpus); () = only the default
    # synthetic prose (docs/measurement.md, "Prompt content")
    content: tuple[str, ...] = ()
    # multi-turn sessions and idle turns after the content phase (labkit/recipe/sessionplan.py); None / ()
    agentic: AgenticPlan | None = None
    idle_s: tuple[int, ...] = ()
    # decode and prefill at context depths, cached and uncached, after the sessions (labkit/recipe/depthplan.py)
    depth: DepthPlan | None = None
    # a fixed short decode before and after the phases, against a healthy baseline (labkit/recipe/canaryplan.py)
    canary: CanaryPlan | None = None

    def headline_measures(self) -> tuple[str, ...]:
        """The catalogue's headline rates this plan measures: decode_c1 and decode_c<K>_agg, prefill_<P> (each
        in plan order), then decode_c1@<category> per content category, as the catalogue orders them
        (docs/measurement.md, "The measure catalogue")."""
        decode = [decode_key(k) for k in self.decode.concurrency] if self.decode.turns >= 1 else []
        content = [content_key("decode_c1", c) for c in self.content] if self.decode.turns >= 1 else []
        prefill = [prefill_key(p) for p in self.prefill.prompt_tokens]
        return tuple(headline(decode + prefill + content, rates_only=True))

    def ci_measures(self) -> tuple[str, ...]:
        """The measures `target_ci` is checked on."""
        return self.target_measures or self.headline_measures()

    def ci_run_cap(self) -> int:
        """How many repetitions at most: `runs` without target_ci, else max_runs (default TARGET_MAX_RUNS)."""
        if self.target_ci is None:
            return self.runs
        return self.max_runs if self.max_runs is not None else max(self.runs, TARGET_MAX_RUNS)
