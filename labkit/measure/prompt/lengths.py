"""Request lengths drawn from a stated distribution (docs/measurement.md, "Serving under load").

Pure: a level's nominal prompt and answer lengths, the spread and a seed in, one request's lengths out. The
spread is vLLM's `--random-range-ratio` convention, so a labkit level and a `vllm bench serve --dataset-name
random` run of the same settings draw from the same ranges: each length uniform over the integers from
⌊L·(1 − r)⌋ to ⌊L·(1 + r)⌋. The seed names the run's seed, the level and the request's order, so two lanes
given the same seed ask for the same lengths in the same order.
"""

from __future__ import annotations

import math
import random

MIN_OUTPUT = 2  # a forced answer has at least two tokens, so its TPOT has a gap to measure


def length_range(nominal: int, ratio: float) -> tuple[int, int]:
    """The lowest and highest length a nominal length spreads to (equal when `ratio` is 0)."""
    if not 0 <= ratio < 1 or not math.isfinite(ratio):
        raise ValueError(f"range ratio {ratio!r}: from 0 up to (not including) 1")
    return int(nominal * (1 - ratio)), int(nominal * (1 + ratio))


def drawn_lengths(prompt: int, output: int, ratio: float, seed: str) -> tuple[int, int]:
    """(prompt tokens, answer tokens) of one request: each uniform over its range, the answer at least
    MIN_OUTPUT; the nominal lengths when `ratio` is 0."""
    if ratio == 0:
        return prompt, output
    rng = random.Random(seed)
    lo_p, hi_p = length_range(prompt, ratio)
    lo_o, hi_o = length_range(output, ratio)
    return rng.randint(lo_p, hi_p), max(MIN_OUTPUT, rng.randint(lo_o, hi_o))
