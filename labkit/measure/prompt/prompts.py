"""Unique, natural-looking prompts of an exact length in server tokens (docs/measurement.md, "Unique prompts of an exact length").

Why natural text: speculative acceptance on random token ids is unrealistic. Why a nonce first: prefix caches
hash chained blocks from the start, so only a leading nonce makes every block unique (the chat template
preamble before the user message stays shared, which is at most one block). Why server tokens: client and
server tokenizers disagree and chat templates add tokens, so the length is calibrated against the server's own
count (`/tokenize`, or `usage.prompt_tokens` of calibration requests) and then checked on every sample.

The prose comes from a small built-in generator (no corpus download): sentences assembled from templates and
word lists, seeded per request so no two prompts share text beyond the instruction.
"""

from __future__ import annotations

import random
import re
import secrets
from collections.abc import Awaitable, Callable

LENGTH_TOLERANCE = 0.01  # prompts must land within ±1% of the target in server tokens

_SUBJECTS = [
    "the old ferryman",
    "a quiet librarian",
    "the harbour master",
    "my grandmother",
    "the young engineer",
    "a travelling botanist",
    "the village baker",
    "an apprentice clockmaker",
    "the night watchman",
    "a retired sea captain",
    "the schoolteacher",
    "two curious children",
    "the lighthouse keeper",
    "a weary surveyor",
    "the town's only doctor",
    "a patient beekeeper",
    "the river pilot",
    "a shy painter",
    "the station master",
    "an elderly astronomer",
    "the miller's daughter",
    "a wandering fiddler",
]
_VERBS = [
    "walked along",
    "looked out over",
    "wrote a long letter about",
    "carefully repaired",
    "spoke softly of",
    "remembered",
    "sketched",
    "measured",
    "wandered through",
    "returned to",
    "listened for",
    "described",
    "waited beside",
    "counted the lamps along",
    "studied",
    "crossed",
    "painted",
    "explained the history of",
    "kept a journal about",
    "planted seeds near",
    "argued about",
    "dreamed of",
]
_OBJECTS = [
    "the frozen canal",
    "the narrow stone bridge",
    "the orchard behind the church",
    "the northern hills",
    "a lantern with a cracked glass",
    "the market square",
    "the salt marshes",
    "an abandoned mill",
    "the long road to the coast",
    "a field of barley",
    "the copper roofs of the old town",
    "the tide pools",
    "a map drawn in faded ink",
    "the garden wall",
    "the railway cutting",
    "a box of letters",
    "the pine forest",
    "the reading room",
    "the winter sky",
    "a small wooden boat",
    "the clock tower",
    "the chalk cliffs",
]
_TIMES = [
    "early in the morning",
    "after the storm had passed",
    "in the last week of autumn",
    "on a grey afternoon",
    "long before the war",
    "when the snow began to melt",
    "late one summer evening",
    "during the harvest",
    "at the turn of the century",
    "while the town was asleep",
    "every Sunday",
    "in the spring of that year",
]
_CLAUSES = [
    "because nobody else remembered how it had been",
    "although the wind was bitter and the light was poor",
    "while the bells rang somewhere across the valley",
    "as if the whole place were holding its breath",
    "and the smell of bread drifted from the open doors",
    "so that the children could see it for themselves",
    "until the last of the daylight had gone",
    "though the path was steep and half washed away",
    "and the gulls circled low over the water",
    "before anyone thought to ask why",
    "while a kettle whistled in the kitchen",
    "and the rain kept falling on the slate roofs",
]
_REFLECTIONS = [
    "It was the kind of thing one only notices with time.",
    "Nobody wrote it down, yet everyone knew.",
    "Years later the story was still told in the same words.",
    "The details changed, but the shape remained.",
    "Some said it was foolish; others called it wise.",
    "There was no hurry, and there never had been.",
    "Even the dogs seemed to understand the mood of the day.",
    "Little by little the town changed around it.",
    "The numbers in the ledger told a plainer story.",
    "Nothing about it was remarkable, and that was the point.",
]
_TOPICS = [
    "a lighthouse",
    "a mountain village",
    "the first train to the coast",
    "a library at night",
    "an old clock",
    "a winter market",
    "a ship in fog",
    "a garden in spring",
    "a long walk home",
    "a letter never sent",
    "the last ferry of the season",
    "a map of an island",
]


def nonce() -> str:
    """A fresh random nonce (never reused across runs or warmups)."""
    return secrets.token_hex(6)


def prose(seed: str | int, n_sentences: int) -> str:
    """Deterministic natural-looking prose for `seed`."""
    rng = random.Random(seed)
    out = []
    for i in range(n_sentences):
        if i and rng.random() < 0.12:
            out.append(rng.choice(_REFLECTIONS))
            continue
        s = f"{rng.choice(_TIMES)}, {rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}"
        if rng.random() < 0.6:
            s += f" {rng.choice(_CLAUSES)}"
        out.append(s[0].upper() + s[1:] + ".")
    paragraphs, k = [], 0
    while k < len(out):
        step = rng.randint(3, 7)
        paragraphs.append(" ".join(out[k : k + step]))
        k += step
    return "\n\n".join(paragraphs)


def decode_prompt(nonce_: str, seed: str | None = None) -> str:
    """A short natural prompt for decode runs; the nonce comes first. Its text is drawn from `seed` when given
    (a shared prompt seed: the same text in another run or lane), else from the nonce."""
    rng = random.Random(nonce_ if seed is None else seed)
    return (
        f"[{nonce_}] Write a long, detailed story about {rng.choice(_TOPICS)}, "
        f"told by {rng.choice(_SUBJECTS)}. Describe the place, the people and the weather."
    )


def prefill_prompt(nonce_: str, n_words: int, seed: str | None = None) -> str:
    """The prefill prompt: nonce, a one-line instruction, then about `n_words` words of prose drawn from
    `seed` when given, else from the nonce."""
    words = prose(nonce_ if seed is None else seed, max(1, n_words // 8 + 2)).split(" ")
    body = " ".join(words[: max(1, n_words)])
    return f"[{nonce_}] Read these notes and summarise them in one sentence.\n\n{body}"


Counter = Callable[[str], Awaitable[int]]


async def fit_prompt(
    target: int,
    count: Counter,
    nonce_: str | None = None,
    *,
    tolerance: float = LENGTH_TOLERANCE,
    words_per_token: float = 0.75,
    max_steps: int = 12,
    exact: bool = False,
    seed: str | None = None,
) -> tuple[str, int, str]:
    """A unique prompt whose server token count is within `tolerance` of `target`, or exactly `target` when
    `exact` (the counter is the server's own, e.g. /tokenize) and a few pad pieces get it there.

    `count` returns the server's token count for a prompt (as the request will send it, template included).
    Secant steps on the word count converge in 2-4 counts; returns (prompt, tokens, nonce). Raises ValueError
    when the target cannot be met (e.g. shorter than the instruction and template).
    """
    nonce_ = nonce_ or nonce()
    words = max(1, int(target * words_per_token))
    best: tuple[int, str, int] | None = None
    seen: dict[int, int] = {}
    for _ in range(max_steps):
        prompt = prefill_prompt(nonce_, words, seed)
        n = await count(prompt)
        seen[words] = n
        err = abs(n - target)
        if best is None or err < best[0]:
            best = (err, prompt, n)
        near = max(tolerance * target / 4, 0.5)  # aim well inside the bound; server counts can jitter
        if err <= near and not exact or any(target - near <= c <= target for c in seen.values()):
            break  # exact: a prompt just under the target, to be padded to it
        new = _next_words(words, n, target, seen)
        if new is None:
            break
        words = new
    assert best is not None
    if exact and best[0]:
        fitted = await _pad_exact(target, await _under(target, nonce_, seen, count, seed), count)
        if fitted is not None:
            return fitted[0], fitted[1], nonce_
    err, prompt, n = best
    if err > tolerance * target:
        raise ValueError(f"could not fit a prompt to {target} tokens (closest: {n})")
    return prompt, n, nonce_


def _next_words(words: int, n: int, target: int, seen: dict[int, int]) -> int | None:
    """The next word count: a secant step through the two closest measurements (None: nothing new to try)."""
    rate = n / words
    others = [w for w in seen if w != words]
    if others:
        w2 = min(others, key=lambda w: abs(w - words))
        if seen[w2] != n:
            rate = (n - seen[w2]) / (words - w2) if words != w2 else rate
    rate = rate if rate > 0 else n / words
    new = max(1, words + round((target - n) / rate))
    if new == words:
        new = words + (1 if n < target else -1)
    return None if new < 1 or new in seen else new


PADS = (" a", ".", "\n", " x")  # pieces of about one token each in most tokenizers; every pad is counted


PAD_TRIES = 6  # server counts per pad piece before the next piece is tried


async def _under(
    target: int, nonce_: str, seen: dict[int, int], count: Counter, seed: str | None = None
) -> tuple[str, int] | None:
    """The longest measured prompt at or under `target`, else one measured a few words shorter."""
    under = [w for w, n in seen.items() if n <= target]
    if under:
        w = max(under, key=lambda w: seen[w])
        return prefill_prompt(nonce_, w, seed), seen[w]
    w = min(seen)
    w = max(1, w - int((seen[w] - target) * w / seen[w]) - 2)
    prompt = prefill_prompt(nonce_, w, seed)
    n = await count(prompt)
    return (prompt, n) if n <= target else None


async def _pad_exact(target: int, base: tuple[str, int] | None, count: Counter) -> tuple[str, int] | None:
    """`base` (at or under target) with pad pieces appended until the server count is exactly `target`;
    None when no piece gets there in a few counts."""
    if base is None:
        return None
    prompt, n = base
    if n == target:
        return prompt, n
    for piece in PADS:
        k = target - n
        tried: set[int] = set()
        while k > 0 and k not in tried and len(tried) < PAD_TRIES:
            tried.add(k)
            got = await count(prompt + piece * k)
            if got == target:
                return prompt + piece * k, got
            # Newton on the piece count: a piece may be worth less (or more) than one token, and pieces merge
            rate = (got - n) / k
            k = round((target - n) / rate) if rate > 0 else k + target - got
            if k in tried:
                k += 1 if got < target else -1
    return None


_PIECES = re.compile(r"\w+|[^\w\s]")


def pieces(text: str) -> int:
    """Words and punctuation marks: a local proxy that tracks subword token counts far better than words."""
    return len(_PIECES.findall(text))


class LinearCounter:
    """Token count estimate `a + b * pieces(prompt)` learned from server-reported prompt_tokens of calibration
    prompts. Used when the server has no tokenize endpoint; every real sample is then checked against its own
    usage.prompt_tokens and flagged when it misses the tolerance."""

    def __init__(self, points: list[tuple[str, int]]):
        if len(points) < 2:
            raise ValueError("need two calibration points")
        self.points: list[tuple[int, int]] = []
        for prompt, tokens in points:
            self.points.append((pieces(prompt), tokens))
        if len({p for p, _ in self.points}) < 2:
            raise ValueError("calibration prompts need different lengths")
        self._fit()

    def add(self, prompt: str, tokens: int) -> None:
        """Learn from a real request's server count, so later prompts of that length land closer."""
        self.points.append((pieces(prompt), tokens))
        self._fit()

    def _fit(self) -> None:
        """Least squares over every point, weighted toward the most recent length (what is being sized now)."""
        xs = [p for p, _ in self.points]
        ys = [n for _, n in self.points]
        w = [1.0] * len(xs)
        w[-1] = 4.0
        sw = sum(w)
        mx = sum(wi * x for wi, x in zip(w, xs, strict=True)) / sw
        my = sum(wi * y for wi, y in zip(w, ys, strict=True)) / sw
        sxx = sum(wi * (x - mx) ** 2 for wi, x in zip(w, xs, strict=True))
        sxy = sum(wi * (x - mx) * (y - my) for wi, x, y in zip(w, xs, ys, strict=True))
        self.b = sxy / sxx
        self.a = my - self.b * mx

    async def __call__(self, prompt: str) -> int:
        return round(self.a + self.b * pieces(prompt))
