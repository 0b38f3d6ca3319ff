"""The measure catalogue: every key a run summary holds, with its title, unit, direction and whether it is a
headline measure, so the plan, the summary text, the tables, the plots and `labkit compare` read one list
instead of keeping their own (docs/measurement.md, "The measure catalogue").

Pure data and lookups, at the base of the tree: recipe, measure and report all import it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Direction = Literal["higher", "lower", "none"]
# The prompt content categories, in display order: one file of the pinned corpus each (labkit/measure/corpus/),
# the names `measure.content` takes, and the `@<category>` suffix of their measures (docs/measurement.md,
# "Prompt content"). A key without a suffix is measured on the default content, fresh synthetic prose.
CONTENT = ("prose", "code", "structured", "chat")
CONTENT_MARK = "@"
# the header a content prompt's text starts with, "[<nonce> <category>] ": labkit/measure/corpus.py writes it,
# the simulator reads the category from it (labkit/sim/speculation.py)
CONTENT_HEADER = re.compile(r"\[([0-9a-f]+) ([a-z]+)\] ")
# a key pattern's placeholders: <N> a concurrency, <P> a prompt length in tokens, <i> a draft position,
# <C> a content category, <T> a turn of an agentic session, <S> seconds of idle engine before an idle turn,
# <D> a context depth in tokens
PLACEHOLDER = re.compile(r"<(N|P|i|C|T|S|D)>")
_GROUPS = {"N": r"(\d+)", "P": r"(\d+)", "i": r"(\d+)", "C": "(" + "|".join(CONTENT) + ")"}
_GROUPS |= {"T": r"(\d+)", "S": r"(\d+)", "D": r"(\d+)"}
RATE = "t/s"
SPEED_UNITS = (RATE, "s")  # a rate or a time: its better side is the faster one


@dataclass(frozen=True)
class Measure:
    """One catalogue row. `key` is a summary key or a pattern of them ("decode_c<N>_agg"); `title` may use
    the same placeholders; `direction` says which way is better ("none": neither, e.g. acceptance);
    `headline`: a lane is judged by it."""

    key: str
    title: str
    unit: str
    direction: Direction
    headline: bool = False

    @property
    def speed(self) -> bool:
        """Whether better means faster (a token rate or a time), so a comparison says faster or slower."""
        return self.direction != "none" and self.unit in SPEED_UNITS

    def regex(self) -> re.Pattern[str]:
        return re.compile(PLACEHOLDER.sub(lambda p: _GROUPS[p.group(1)], re.escape(self.key)))


# agentic sessions per turn <T> and idle turns after <S> seconds (docs/measurement.md, "Agentic sessions",
# "Idle turns"): one tuple, so the catalogue takes them in one line
TURN_MEASURES: tuple[Measure, ...] = (
    Measure("agentic_ttft_t<T>", "TTFT, session turn <T>", "s", "lower"),
    Measure("agentic_prefill_t<T>", "prefill of the new tokens, session turn <T>", RATE, "higher"),
    Measure("agentic_new_tokens_t<T>", "new (uncached) prompt tokens, session turn <T>", "tokens", "none"),
    Measure("agentic_prompt_tokens_t<T>", "prompt tokens, session turn <T>", "tokens", "none"),
    Measure("agentic_hit_t<T>", "prefix-cache hit tokens, session turn <T> (engine)", "tokens", "none"),
    Measure(
        "agentic_hit_expected_t<T>", "prefix-cache hit tokens, session turn <T> (expected)", "tokens", "none"
    ),
    Measure("agentic_decode_t<T>", "decode, session turn <T>", RATE, "higher"),
    Measure("agentic_hit_agreement", "session turns whose engine hits match the expected", "ratio", "none"),
    Measure("idle_<S>_ttft", "TTFT after <S> s idle", "s", "lower"),
    Measure("idle_<S>_decode", "decode after <S> s idle", RATE, "higher"),
    Measure("idle_<S>_slowdown", "decode c1 / decode after <S> s idle", "ratio", "none"),
)

# per context depth <D>, the context uncached (a fresh one) and cached (sent before): depth_<D>_<m> and
# depth_<D>_<m>_cached (docs/measurement.md, "Context depth"; labkit/measure/summary_depth.py)
DEPTH_STATES = {"uncached": "", "cached": "_cached"}  # a cache state's key suffix
_DEPTH_ROWS: tuple[tuple[str, str, str, Direction], ...] = (
    ("ttft", "TTFT", "s", "lower"),
    ("prefill", "prefill of the new tokens", RATE, "higher"),
    ("decode", "decode", RATE, "higher"),
    ("prompt_tokens", "prompt tokens", "tokens", "none"),
    ("new_tokens", "new (uncached) prompt tokens", "tokens", "none"),
    ("hit", "prefix-cache hit tokens (engine)", "tokens", "none"),
    ("hit_expected", "prefix-cache hit tokens (expected)", "tokens", "none"),
)
DEPTH_MEASURES: tuple[Measure, ...] = tuple(
    Measure(f"depth_<D>_{m}{suffix}", f"{title} at depth <D>, {state}", unit, better)
    for m, title, unit, better in _DEPTH_ROWS
    for state, suffix in DEPTH_STATES.items()
    if m != "hit_expected" or state == "cached"  # a fresh context has no hits to expect
) + (
    Measure("depth_<D>_ttft_gain", "TTFT at depth <D>, uncached / cached", "ratio", "none"),
    Measure(
        "depth_hit_agreement", "cached depth requests whose engine hits match the expected", "ratio", "none"
    ),
)

# In display order: decode, prefill, TTFT, acceptance, caches, KV pool, NFS, node telemetry.
CATALOGUE: tuple[Measure, ...] = (
    Measure("decode_c1", "decode c1", RATE, "higher", headline=True),
    Measure("decode_c1_cold", "decode c1, cold turn", RATE, "higher"),
    Measure("decode_c<N>_agg", "decode c<N> aggregate", RATE, "higher", headline=True),
    Measure("decode_c<N>_span", "decode c<N> span", RATE, "higher"),
    Measure("decode_c<N>_overlap", "decode c<N> overlap", "ratio", "none"),
    Measure("decode_c<N>_concurrency", "decode c<N> effective concurrency", "streams", "none"),
    Measure("decode_c<N>_engine", "decode c<N> per request, engine's own", RATE, "higher"),
    Measure("decode_c<N>_engine_gap", "decode c<N>, client / engine - 1", "ratio", "none"),
    Measure("decode_c<N>_ttft_engine_gap", "TTFT c<N>, client - engine", "s", "none"),
    Measure(
        "decode_c<N>_accept_per_draft",
        "accepted per drafting step at c<N> (per request)",
        "tokens/step",
        "none",
    ),
    Measure("decode_c<N>_accept_length", "acceptance length at c<N> (per request)", "tokens/step", "none"),
    Measure("prefill_<P>", "prefill <P>-token prompt", RATE, "higher", headline=True),
    Measure("prefill_<P>_raw", "prefill <P>-token prompt, raw", RATE, "higher"),
    Measure("prefill_<P>_ttft", "TTFT of the <P>-token prompt", "s", "lower"),
    Measure("ttft_c1", "TTFT c1", "s", "lower", headline=True),
    Measure("ttft_c1_server", "TTFT c1, engine's own", "s", "lower"),
    Measure("accept_per_draft", "accepted per drafting step", "tokens/step", "none"),
    Measure("accept_k", "draft tokens per step (K)", "tokens", "none"),
    Measure("accept_length", "acceptance length", "tokens/step", "none", headline=True),
    Measure("accept_length_stream", "tokens per SSE chunk", "tokens/chunk", "none"),
    Measure("accept_proposed_per_draft", "proposed per drafting step", "tokens/step", "none"),
    Measure("accept_drafted_share", "share of decode steps drafted", "ratio", "none"),
    Measure("accept_rate", "acceptance rate", "ratio", "none"),
    Measure("accept_pos_<i>", "accepted at draft position <i>", "ratio", "none"),
    # by prompt content: c1 turns on the corpus prompts of one category, each category its own window
    Measure("decode_c1@<C>", "decode c1, <C> prompts", RATE, "higher", headline=True),
    Measure("ttft_c1@<C>", "TTFT c1, <C> prompts", "s", "lower"),
    Measure("accept_length@<C>", "acceptance length, <C> prompts", "tokens/step", "none", headline=True),
    Measure("accept_length_stream@<C>", "tokens per SSE chunk, <C> prompts", "tokens/chunk", "none"),
    Measure("accept_per_draft@<C>", "accepted per drafting step, <C> prompts", "tokens/step", "none"),
    Measure(
        "accept_proposed_per_draft@<C>", "proposed per drafting step, <C> prompts", "tokens/step", "none"
    ),
    Measure("accept_drafted_share@<C>", "share of decode steps drafted, <C> prompts", "ratio", "none"),
    Measure("accept_rate@<C>", "acceptance rate, <C> prompts", "ratio", "none"),
    # agentic sessions, per turn (labkit/measure/summary_turns.py), and idle turns
    *TURN_MEASURES,
    *DEPTH_MEASURES,
    Measure("prefix_cache_hit_ratio", "prefix-cache hits (prefill)", "ratio", "none"),
    Measure("kv_pool_tokens", "KV pool", "tokens", "none"),
    Measure("kv_pool_context", "KV pool context", "tokens", "none"),
    Measure("nfs_read_bytes", "shared-NFS reads", "bytes", "none"),
    Measure("nfs_read_bytes_per_completion", "shared-NFS reads per completion", "bytes", "none"),
    Measure("energy_per_token_decode", "energy per output token (decode)", "J/tok", "lower"),
    Measure("energy_per_token_prefill_<P>", "energy per prompt token (<P>-token prefill)", "J/tok", "lower"),
    Measure("sm_clock_decode_median", "SM clock (decode, lowest node median)", "MHz", "none"),
    # the slow-state canary: a fixed short decode before and after the phases (labkit/measure/summary_canary.py)
    Measure("canary_ms", "canary ms per token (the slower of before and after)", "ms/tok", "lower"),
    Measure("canary_ms_before", "canary ms per token, before the phases", "ms/tok", "lower"),
    Measure("canary_ms_after", "canary ms per token, after the phases", "ms/tok", "lower"),
)


# each row's key pattern compiled once: every title, unit, direction and order lookup walks these
_PATTERNS = tuple((row, row.regex()) for row in CATALOGUE)


def _match(key: str) -> tuple[int, Measure, re.Match[str]] | None:
    for i, (row, pattern) in enumerate(_PATTERNS):
        if hit := pattern.fullmatch(key):
            return i, row, hit
    return None


def measure_info(key: str) -> Measure | None:
    """The catalogue row a summary key matches, None for a key the catalogue does not know."""
    found = _match(key)
    return found[1] if found else None


def direction(key: str) -> Direction:
    """Which way is better for this key; "none" for a key without one or not in the catalogue."""
    row = measure_info(key)
    return row.direction if row else "none"


def is_headline(key: str, rates_only: bool = False) -> bool:
    """A headline measure (a lane is judged by it); `rates_only`: only the token-rate ones (decode c1, the
    cK aggregates, prefill), the figures a plan repeats for and a sweep plot shows."""
    row = measure_info(key)
    return row is not None and row.headline and (row.unit == RATE or not rates_only)


def headline(keys: Iterable[str], rates_only: bool = False) -> list[str]:
    """The headline measures among `keys`, in the order given."""
    return [k for k in keys if is_headline(k, rates_only)]


def order_key(key: str) -> tuple[int, int, str]:
    """Catalogue order, then the key's number (c2 before c16, prefill_4096 before prefill_12600) or its
    content category in CONTENT order; unknown keys last."""
    found = _match(key)
    if not found:
        return len(CATALOGUE), 0, key
    i, _, hit = found
    if not hit.groups():
        return i, 0, key
    first = hit.group(1)
    return i, CONTENT.index(first) if first in CONTENT else int(first), key


def title(key: str) -> str:
    """The catalogue title with the key's number filled in ("decode c2 aggregate", "prefill 4,096-token
    prompt"); the key itself when the catalogue does not know it."""
    found = _match(key)
    if not found:
        return key
    _, row, hit = found
    numbers = iter(hit.groups())
    return PLACEHOLDER.sub(lambda p: _number(p.group(1), next(numbers)), row.title)


def _number(placeholder: str, digits: str) -> str:
    return f"{int(digits):,}" if placeholder in ("P", "D") else digits  # a content category is kept as it is


def unit(key: str) -> str:
    """The key's unit ("t/s", "s", "J/tok", ...); "" when the catalogue does not know it."""
    row = measure_info(key)
    return row.unit if row else ""


def label(key: str) -> str:
    """Title and unit, as a plot axis names a measure: "decode c2 aggregate (t/s)"; unknown keys as they are."""
    row = measure_info(key)
    return f"{title(key)} ({row.unit})" if row else key


def decode_key(concurrency: int) -> str:
    """The headline decode key at a concurrency: decode_c1 per request, decode_c<N>_agg for N streams."""
    return "decode_c1" if concurrency == 1 else f"decode_c{concurrency}_agg"


def prefill_key(prompt_tokens: int) -> str:
    """The headline prefill key at a prompt length."""
    return f"prefill_{prompt_tokens}"


def prefill_tokens(key: str) -> int | None:
    """The prompt length of a headline prefill key (prefill_key's inverse), None for any other key."""
    head, _, digits = key.partition("_")
    return int(digits) if head == "prefill" and digits.isdigit() else None


def depth_key(measure: str, depth: int, state: str) -> str:
    """The key of a measure at a context depth in a cache state: depth_8192_ttft, depth_8192_ttft_cached."""
    return f"depth_{depth}_{measure}{DEPTH_STATES[state]}"


def content_key(key: str, category: str) -> str:
    """The key of a measure taken on one content category: decode_c1 on code prompts is decode_c1@code."""
    return f"{key}{CONTENT_MARK}{category}"


def split_content(key: str) -> tuple[str, str | None]:
    """(the measure, its content category) of a key: ("decode_c1", "code") for decode_c1@code, (key, None)
    for a key measured on the default content or not ending in a known category."""
    base, mark, category = key.rpartition(CONTENT_MARK)
    return (base, category) if mark and base and category in CONTENT else (key, None)


# what a measured window covers beyond its own key and <window>_*: the whole decode phase's window also its
# acceptance and its TTFTs, the warm c1 window its TTFT but not the cold turn's figures
_WINDOW_ALSO = {"decode": ("accept_", "ttft_c"), "decode_c1": ("ttft_c1",)}
_WINDOW_NOT = {"decode_c1": ("decode_c1_cold",)}


def window_covers(window: str, key: str) -> bool:
    """Whether a summary measure is made of a measured window's requests, for the flags of the evidence
    (decode, prefill_4096, decode@code) and of output sanity (decode_c1, decode_c1_cold, decode_c2, ...) alike
    (docs/measurement.md, "Output sanity"): the content categories must match, so decode@code covers the code
    figures only and decode none of a category's; prefill_4096 covers prefill_4096_* but not prefill_40960."""
    window, window_content = split_content(window)
    key, key_content = split_content(key)
    if window_content != key_content or key.startswith(_WINDOW_NOT.get(window, ())):
        return False
    return key == window or key.startswith((f"{window}_", *_WINDOW_ALSO.get(window, ())))


def content_header(nonce: str, category: str) -> str:
    """The header of a content prompt: the nonce and the category, before the prompt as written."""
    return f"[{nonce} {category}] "


def header_content(text: object) -> str | None:
    """The category a prompt's header names; None for any other text (the default content)."""
    found = CONTENT_HEADER.match(text) if isinstance(text, str) else None
    return found.group(2) if found and found.group(2) in CONTENT else None
