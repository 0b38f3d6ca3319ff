"""The pinned prompt corpus: the prompts `measure.content` measures decode and acceptance on, one category per
file under corpus/ (docs/measurement.md, "Prompt content"; origin and licence in corpus/README.md).

Why a corpus and not the prose generator: speculative acceptance depends on what is asked. Prompt lookup
(ngram) drafts from the prompt, so code to be edited accepts far more than a story request, and a learned
drafter is better on some kinds of text than others; one kind of synthetic prose says nothing about that.
Why pinned: a prompt that changes changes the acceptance, so the files are part of the repository, never
downloaded, and every run that used them stores their digest.

A content prompt is `[<nonce> <category>] <text>`: the fresh nonce first, as in every labkit prompt (no
prefix-cache hit across requests), then the category, which is also how the simulator tells a category
from the prompt text. Which prompts a run draws is seeded like the other prompt texts (RunContext.text_seed).
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError
from labkit.measures import CONTENT, content_header

PROMPT_START = re.compile(r"^=== (\S+)\s*$")


class CorpusError(LabkitError):
    """A corpus file is missing or malformed; names the file and line."""


@dataclass(frozen=True)
class CorpusPrompt:
    id: str  # "code-07": unique within its category's file
    category: str
    text: str


@dataclass(frozen=True)
class Corpus:
    """Every category's prompts in file order, and the digest that pins them (SHA-256 over the files)."""

    prompts: dict[str, tuple[CorpusPrompt, ...]]
    digest: str

    def draw(self, category: str, seed: str, count: int) -> list[CorpusPrompt]:
        """`count` prompts of `category` in an order shuffled by `seed`: distinct until the category runs
        out, then the same order again. The same seed draws the same prompts in every run and lane."""
        pool = list(self.prompts[category])
        random.Random(f"corpus/{category}/{seed}").shuffle(pool)
        return [pool[i % len(pool)] for i in range(count)]

    def facts(self) -> dict[str, Any]:
        """What a run stores about the corpus it drew from (provenance.prompt_corpus)."""
        return {"digest": self.digest, "prompts": {c: len(p) for c, p in self.prompts.items()}}


def parse(text: str, category: str, file: str) -> tuple[CorpusPrompt, ...]:
    """One category file's prompts; CorpusError naming the file and line for text outside a prompt, an id
    of another category, a repeated id or an empty prompt."""
    out: list[CorpusPrompt] = []
    current: tuple[str, int] | None = None
    lines: list[str] = []

    def close() -> None:
        if current is None:
            return
        body = "\n".join(lines).strip("\n")
        if not body.strip():
            raise CorpusError(f"{file}:{current[1]}: prompt {current[0]!r} is empty")
        out.append(CorpusPrompt(current[0], category, body))

    seen: set[str] = set()
    for n, line in enumerate(text.splitlines(), 1):
        start = PROMPT_START.match(line)
        if start:
            close()
            pid = start.group(1)
            if not pid.startswith(f"{category}-"):
                raise CorpusError(f"{file}:{n}: prompt id {pid!r} must start with '{category}-'")
            if pid in seen:
                raise CorpusError(f"{file}:{n}: prompt id {pid!r} appears twice")
            seen.add(pid)
            current, lines = (pid, n), []
        elif current is not None:
            lines.append(line.rstrip())
        elif line.strip() and not line.startswith("#"):
            raise CorpusError(f"{file}:{n}: text before the first '=== {category}-…' line")
    close()
    if not out:
        raise CorpusError(f"{file}: no prompts")
    return tuple(out)


def read_corpus(folder: Path) -> Corpus:
    """The corpus in `folder`: one `<category>.txt` per name in CONTENT (labkit.measures)."""
    prompts, h = {}, hashlib.sha256()
    for category in CONTENT:
        path = Path(folder) / f"{category}.txt"
        try:
            raw = path.read_bytes()
        except OSError as e:
            raise CorpusError(f"{path}: cannot read the {category!r} prompts: {e.strerror or e}")
        h.update(category.encode() + b"\0" + raw + b"\0")
        prompts[category] = parse(raw.decode("utf-8"), category, str(path))
    return Corpus(prompts, h.hexdigest())


@functools.lru_cache(maxsize=1)
def load_corpus() -> Corpus:
    """The corpus shipped with labkit (package data, read once per process)."""
    with resources.as_file(resources.files("labkit.measure.prompt") / "corpus") as folder:
        return read_corpus(folder)


def content_prompt(nonce: str, prompt: CorpusPrompt) -> str:
    """The request text for a corpus prompt: the nonce and the category first, then the prompt as written."""
    return content_header(nonce, prompt.category) + prompt.text
