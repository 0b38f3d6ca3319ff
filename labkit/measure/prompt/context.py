"""The requests of a context-depth measurement as text: the question sent after a context, and the two shapes
a context takes, the load request that puts it in the prefix cache and the measured request that repeats it
(docs/measurement.md, "Context depth").

The context itself is a fitted prefill prompt (labkit/measure/prompt/prompts.py, fit_prompt): a fresh nonce first, so
no other request shares its prefix, then seeded prose, `D` server tokens in all as the engine counts a request
of it alone (template included). The measured request repeats that request token for token, then asks a
question of about `q` tokens with its own nonce: in chat, the context is the first user message, a fixed
acknowledgement the assistant's, the question the next user message; in completions, the question follows the
context after a blank line. Pure: text in, request text out.
"""

from __future__ import annotations

import random
from typing import Any

from labkit.measure.prompt import prompts as pr
from labkit.measure.prompt.conversation import AGENTIC_WINDOW
from labkit.measures import LOOP_AXIS, QUALIFIER_MARK, QUALIFIER_SET

SESSION_LEVEL = f"{QUALIFIER_MARK}{LOOP_AXIS['sessions']}{QUALIFIER_SET}"  # load@sessions=S: agentic levels
ACK = "Noted."  # the assistant's reply to the context in the measured chat request, fixed so caching sees it
_ASKS = (
    "Which of the notes above mention the weather? Answer in one short sentence.",
    "Name two people the notes above mention. Answer in one short sentence.",
    "What happens first in the notes above? Answer in one short sentence.",
)


def depth_window(depth: int) -> str:
    """The evidence window of the requests at context depth `depth`: depth_8192."""
    return f"depth_{depth}"


def cached_by_design(window: str) -> bool:
    """Whether a window's prompts hit the prefix cache by design (the sessions', a session load level's, the
    depths' and the canary's fixed prompt), so its hits raise no flag."""
    return window == AGENTIC_WINDOW or SESSION_LEVEL in window or window.startswith(("depth_", "canary_"))


def question(nonce: str, seed: str, n_pieces: int) -> str:
    """The question after the context: its nonce, about `n_pieces` words and punctuation marks of seeded notes
    (prompts.pieces, a proxy for tokens), then the ask."""
    rng = random.Random(f"{seed}:question")
    ask = rng.choice(_ASKS)
    head = f"[{nonce}] More notes:"
    room = max(0, n_pieces - pr.pieces(head) - pr.pieces(ask))
    words = pr.prose(f"{seed}:notes", max(1, room // 8 + 2)).split(" ")
    while len(words) > 1 and pr.pieces(" ".join(words)) > room:
        words.pop()
    body = " ".join(words) if room else ""
    return "\n\n".join(filter(None, (head, body, ask)))


def measured_chat(context: str, ask: str) -> list[dict[str, Any]]:
    """The measured chat request: the context as it was loaded, the fixed acknowledgement, the question."""
    return [
        {"role": "user", "content": context},
        {"role": "assistant", "content": ACK},
        {"role": "user", "content": ask},
    ]


def measured_text(context: str, ask: str) -> str:
    """The measured completions prompt: the context as it was loaded, a blank line, the question."""
    return f"{context}\n\n{ask}"
