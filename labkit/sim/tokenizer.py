"""The simulator's tokenizer: deterministic and simple enough to build prompts of an exact length by hand.

Rules (the whole specification):
- Text is split into words (runs of Unicode letters, digits and `_`) and single punctuation/symbol
  characters; whitespace is never a token. "Hello, world!" -> 4 tokens: Hello , world !
- A word longer than 8 characters is split into pieces of 8 characters (the last may be shorter):
  "internationalization" (20 chars) -> 3 tokens.
- Token ids: special ids below 100 (BOS=1, EOS=2, ...); any other piece has id 100 + crc32(piece) % 99_900.
- A completions prompt (string) is BOS + its pieces: len = pieces + 1. A prompt given as a list of ints is
  used as token ids unchanged.
- A chat prompt uses a fixed template: BOS, then per message START, ROLE, content pieces, END, then the
  generation prompt START, ASSISTANT. So len = 1 + sum(3 + pieces(content)) + 2; one user message adds 6.
  Content may be a string or a list of {"type": "text", "text": ...} parts (joined by a space).
- Generated text is drawn from WORDS; each generated token is " <word>" and re-tokenises to one token.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

PAD, BOS, EOS, START, END = 0, 1, 2, 3, 4
ROLE_IDS = {"system": 5, "user": 6, "assistant": 7, "tool": 8, "developer": 9}
MAX_PIECE = 8
CHAT_OVERHEAD_PER_MESSAGE = 3
CHAT_OVERHEAD_FIXED = 3  # BOS + generation prompt (START, ASSISTANT)

_PIECE = re.compile(r"\w+|[^\w\s]")

WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "is",
    "that",
    "for",
    "it",
    "as",
    "was",
    "with",
    "be",
    "by",
    "on",
    "not",
    "he",
    "this",
    "are",
    "or",
    "his",
    "from",
    "at",
    "which",
    "but",
    "have",
    "an",
    "they",
    "you",
    "were",
    "her",
    "she",
    "there",
    "one",
    "all",
    "we",
    "can",
    "their",
    "has",
    "been",
    "if",
    "more",
    "when",
    "will",
    "would",
    "who",
    "so",
    "no",
    "river",
    "stone",
    "light",
    "water",
    "field",
    "north",
    "house",
    "night",
    "story",
]


class TokenizeError(ValueError):
    """Input the tokenizer cannot take (wrong type of prompt or message)."""


def pieces(text: str) -> list[str]:
    """Text -> token pieces per the module rules."""
    out: list[str] = []
    for m in _PIECE.findall(text):
        if len(m) <= MAX_PIECE:
            out.append(m)
        else:
            out.extend(m[i : i + MAX_PIECE] for i in range(0, len(m), MAX_PIECE))
    return out


def piece_id(piece: str) -> int:
    return 100 + zlib.crc32(piece.encode()) % 99_900


def encode(text: str) -> list[int]:
    """Text -> ids, no special tokens."""
    return [piece_id(p) for p in pieces(text)]


def encode_prompt(prompt: Any, add_special_tokens: bool = True) -> list[int]:
    """A completions prompt (string or list of token ids) -> ids."""
    if isinstance(prompt, str):
        return ([BOS] if add_special_tokens else []) + encode(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return list(prompt)
    raise TokenizeError("prompt must be a string or a list of token ids (batched prompts are not simulated)")


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise TokenizeError('message content parts must be {"type": "text", "text": ...}')
            parts.append(part["text"])
        return " ".join(parts)
    raise TokenizeError("message content must be a string or a list of text parts")


def encode_chat(messages: Any, add_generation_prompt: bool = True) -> list[int]:
    """Chat messages -> ids through the fixed template (see module docstring)."""
    if not isinstance(messages, list) or not messages:
        raise TokenizeError("messages must be a non-empty list")
    ids = [BOS]
    for m in messages:
        if not isinstance(m, dict) or "role" not in m:
            raise TokenizeError("each message must be an object with a role")
        ids.append(START)
        ids.append(ROLE_IDS.get(str(m["role"]), piece_id(str(m["role"]))))
        ids.extend(encode(_content_text(m.get("content"))))
        ids.append(END)
    if add_generation_prompt:
        ids += [START, ROLE_IDS["assistant"]]
    return ids
