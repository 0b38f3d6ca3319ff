"""The simulator's speculative decoding: which acceptance rates a request draws from, and one drafting step.

A request's prompt content category comes from the header labkit puts before a corpus prompt,
`[<hex nonce> <category>] ` at the start of the last user message (chat) or of the prompt (completions); any
other text is the default content. A request of category c uses `spec_accept_<c>` when that is set, else
`spec_accept` (docs/measurement.md, "Prompt content"). The step time does not depend on the category (the
engine does the same work per step whatever the text), so a category's decode rate is
decode_tps x (1 + sum of its rates) / (1 + sum of spec_accept): its truth.

One step: a uniform draw u; position i is accepted iff u < rates[i]. The rates are non-increasing, so the
accepted positions are a prefix and P(position i accepted) = rates[i] exactly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from labkit.measures import CONTENT, header_content


def content_field(category: str) -> str:
    """The setting that holds a category's rates: spec_accept_code."""
    return f"spec_accept_{category}"


def content_of_text(text: Any) -> str:
    """The category a prompt's header names; "" for any other text (the default content)."""
    return header_content(text) or ""


def request_content(endpoint: str, data: dict) -> str:
    """The category of a generation request body: the last user message's text (chat), or the prompt."""
    if endpoint != "chat":
        return content_of_text(data.get("prompt"))
    messages = data.get("messages")
    users = (
        [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if isinstance(messages, list)
        else []
    )
    if not users:
        return ""
    content = users[-1].get("content")
    if isinstance(content, list):  # parts: the text parts joined by a space, as the tokenizer reads them
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content_of_text(content)


@dataclass
class Drafter:
    """The acceptance model of one simulator: K and the per-position rates of each content category."""

    default: list[float]
    by_content: dict[str, list[float]] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return len(self.default)

    def rates(self, content: str) -> list[float]:
        """The rates a request of this category draws from: its own when set, else the default."""
        return self.by_content.get(content) or self.default

    def accepted(self, rng: random.Random, content: str) -> int:
        """Accepted draft tokens of one step (one uniform draw against the category's rates)."""
        u, n = rng.random(), 0
        for a in self.rates(content):
            if u >= a:
                break
            n += 1
        return n


def drafter(cfg: Any) -> Drafter | None:
    """The drafter a SimConfig describes; None with speculation off."""
    if not cfg.spec_on:
        return None
    by = {c: list(getattr(cfg, content_field(c))) for c in CONTENT if getattr(cfg, content_field(c))}
    return Drafter(list(cfg.spec_accept), by)


def check_rates(key: str, rates: list[float], k: int) -> str | None:
    """Why `rates` cannot be a drafter's per-position acceptance for K = k (None when they can)."""
    if len(rates) != k:
        return f"needs {k} rates (one per draft position), got {len(rates)}"
    if any(not 0 <= a <= 1 for a in rates):
        return "rates must be within [0, 1]"
    if any(b > a for a, b in zip(rates, rates[1:], strict=False)):
        return "rates must be non-increasing (position i needs positions < i accepted)"
    return None
