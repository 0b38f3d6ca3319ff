"""One agentic session as chat messages, and what its turns should find in the prefix cache
(docs/measurement.md, "Agentic sessions").

A session opens with one user message that starts with a fresh nonce (so no two sessions, and no fresh prompt
of the other phases, share a prefix with it beyond the chat template's preamble). Every later turn appends the
previous answer as the assistant's message and a tool result as a user message, then asks for a short answer:
the conversation only grows, so each turn's prompt repeats the previous turn's prompt token for token when the
chat template renders earlier messages unchanged (the usual templates do).

Pure: text in, text and numbers out. The tool results are synthetic and deterministic (seeded prose laid out as
a tool's output lines, sized by words and punctuation marks, a proxy for tokens); the server's own count of
each prompt is what the records keep.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from labkit.measure.prompt import prompts as pr
from labkit.measure.server import metrics as mx

AGENTIC_WINDOW = "agentic"  # the sessions' evidence window; its prompts hit the prefix cache by design
SESSION_MARK = "agentic"  # the opening message's marker after the nonce: "[<nonce> agentic] ..."
CACHE_INFO = "vllm:cache_config_info"  # its block_size label: the prefix cache's block (docs/engines.md)
_TOOLS = ("read_file", "search_code", "run_tests", "list_directory", "query_logs", "fetch_page")
_PATHS = ("src/core", "src/api", "lib/util", "tests/unit", "docs/guide", "tools/build")


def opening(nonce: str, seed: str) -> str:
    """The session's first user message: the nonce first, then the task the tool results belong to."""
    rng = random.Random(seed)
    return (
        f"[{nonce} {SESSION_MARK}] You are an assistant working through a task step by step with tools. "
        f"The task: find out why the {rng.choice(_PATHS).split('/')[-1]} module misbehaves and say what to "
        "change. After each tool result, answer in one or two short sentences."
    )


def tool_result(seed: str, tokens: int, turn: int) -> str:
    """A tool's output of about `tokens` tokens (counted as words and punctuation marks), deterministic for
    `seed`: a header naming the tool and numbered output lines of seeded prose."""
    rng = random.Random(f"{seed}:tool")
    tool, path = rng.choice(_TOOLS), rng.choice(_PATHS)
    lines = [f"Tool result ({tool}, call {turn}):"]
    text = lines[0]
    i = 0
    while pr.pieces(text) < tokens:
        i += 1
        sentence = pr.prose(f"{seed}:{i}", 1).strip()
        lines.append(f"{path}/{rng.choice(_TOOLS)}.py:{rng.randint(1, 900)}: {sentence}")
        text = "\n".join(lines)
    words = text.split(" ")
    while len(words) > 1 and pr.pieces(" ".join(words)) > tokens:  # trim the last line to the size
        words.pop()
    return " ".join(words) + "\n\nWhat does this tell you? Answer briefly."


@dataclass
class Conversation:
    """The growing message list of one session, and its previous turn's prompt and answer sizes."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    prev_prompt: int | None = None  # the previous turn's prompt tokens (the server's count)
    prev_output: int | None = None  # ... and its answer's tokens
    broken: str = ""  # why the session stopped (a failed turn has no answer to append)

    def open(self, text: str) -> None:
        self.messages = [{"role": "user", "content": text}]

    def follow(self, answer: str, tool: str) -> None:
        """The previous answer as the assistant's message, then the next tool result."""
        self.messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": tool}]

    def turn_done(self, prompt_tokens: int | None, output_tokens: int | None) -> None:
        self.prev_prompt, self.prev_output = prompt_tokens, output_tokens


def expected_hits(
    prev_prompt: int | None, prev_output: int | None, prompt: int | None, block: int | None
) -> tuple[int, int] | None:
    """(least, most) prefix-cache hit tokens a turn should show, from what the previous turn put in the cache.

    The least: the previous prompt, which this prompt repeats, in whole blocks. The most: the previous prompt
    and its answer's KV (every answer token but the last, which is sampled and never computed), in whole
    blocks; an engine that caches generated tokens (vLLM) may reach it when the template re-renders the answer
    as the same tokens. Both at most the prompt less its last token, which engines always compute. `block`
    None (unknown) counts in tokens (a block of 1). None for the first turn or without the server's counts."""
    if prev_prompt is None or prev_output is None or prompt is None:
        return None
    b = max(1, block or 1)
    cap = prompt - 1
    least = min(prev_prompt, cap) // b * b
    most = min(prev_prompt + max(prev_output - 1, 0), cap) // b * b
    return least, max(least, most)


def block_size(samples: mx.Samples | None) -> int | None:
    """The prefix cache's block size from vLLM's cache_config_info labels, None where not exported."""
    for labels, _ in (samples or {}).get(CACHE_INFO, []):
        value = labels.get("block_size", "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None
