"""What an import reads out of one result of another tool, before anything is stored: the tool and its
version as the file gives them, the setting it measured (concurrency, prompt and output lengths, depth), its
figures under their own names and units, and the provenance the file carries ("unknown" for the rest).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from labkit.store import UNKNOWN, tool_label

# a file labkit export wrote: the tool's fields computed by labkit from its own stamps, not the tool's measurement
EXPORTER = "labkit export"
EXPORT_VERSION = "labkit-"  # llama-benchy's `version` of an export: labkit-<labkit version>
EXPORT_RUN_KEY = "labkit_run_id"  # the text key (a --metadata pair) naming the run in a vllm-bench export
EXPORTED = ("labkit-export", "computed by labkit export from labkit's own stamps")  # an export's qualifier


def scale_of(tokens: int | None) -> int | None:
    """The power of two nearest a counted length (140 -> 128, 4108 -> 4096, 31 -> 32): the length a tool was most
    likely asked for, chat template and end-of-sequence aside; None for none."""
    if not tokens or tokens <= 0:
        return None
    return int(2 ** round(math.log2(tokens)))


@dataclass(frozen=True)
class Setting:
    """What one result measured, as far as the file says: None where it does not."""

    concurrency: int | None = None
    prompt_tokens: int | None = None  # the configured prompt length (not what the server counted)
    output_tokens: int | None = None
    depth: int | None = None  # context tokens before the prompt (llama-benchy's context_size)
    requests: int | None = None
    rate: str | None = None  # requests per second, "inf" for all at once
    schedule: str | None = None  # how a rate was paced, where the tool names it: "constant", "poisson"
    phase: Literal["context-load"] | None = None  # a result that is not a measurement of its own
    # the lengths are means per request of the tokens the file counted, since it names no configured length
    # (vllm bench serve): never a labkit prefill_<P>; compared and named by their scale (scale_of)
    counted: bool | None = None

    def variant_id(self, fmt: str) -> str:
        """The stored lane's variant: the format and what sets its figures apart (c2, pp512, d4096, r4). Counted
        lengths drift between runs of one command, so only the prompt's scale names it (in128); the output's,
        which an end-of-sequence makes vary, is left to the comparison."""
        parts = [fmt]
        if self.counted:
            lengths = [("in", scale_of(self.prompt_tokens))]
        else:
            lengths = [("pp", self.prompt_tokens), ("tg", self.output_tokens)]
        for prefix, value in [("c", self.concurrency), *lengths]:
            if value is not None:
                parts.append(f"{prefix}{value}")
        if self.depth:
            parts.append(f"d{self.depth}")
        if self.rate not in (None, "inf"):
            parts.append(f"r{self.rate}")
        for word in (self.schedule, self.phase):
            if word:
                parts.append(word)
        return "_".join(parts)

    def comparable(self) -> dict[str, Any]:
        """What one result measured, as the comparability gate checks it (stored as the plan's
        `imported.compared`): every setting but the number of requests, which says how long it ran, not what
        (as labkit's own repetition settings); counted lengths by their scale, so runs of one command agree."""
        out = {k: v for k, v in self.to_dict().items() if k != "requests"}
        if self.counted:
            for key in ("prompt_tokens", "output_tokens"):
                if key in out:
                    out[key] = f"~{scale_of(out[key])}"
        return out

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass(frozen=True)
class Imported:
    """One result of another tool: one stored run. `figures` are {field: value} in the tool's own units;
    `ok` and `failed` the requests that ended well and not, as the file counts them (None: it does not);
    `unread` the keys kept but not read."""

    format: str  # a key of labkit.exchange.formats.FORMATS
    tool: str  # the tool as its users call it ("vllm bench serve")
    tool_version: str
    setting: Setting
    figures: dict[str, float]
    provenance: dict[str, Any]
    index: int = 0  # which result of the file (a row, a benchmark, a line)
    ok: int | None = None
    failed: int | None = None
    notes: tuple[str, ...] = ()
    unread: tuple[str, ...] = field(default=())
    # which branch of the tool's definitions the figures follow, where they have two, as (id suffix, why):
    # a labkit export's fields were computed by labkit, aiperf's tokens counted by its tokenizer. The
    # definitions then get ids of their own (`<field>@<suffix>`), so the gate never takes one for the other.
    qualifier: tuple[str, str] | None = None

    @property
    def tool_label(self) -> str:
        """The tool and its version as the file gives it (store.tool_label)."""
        return tool_label(self.tool, self.tool_version)

    @property
    def model(self) -> str:
        return str(self.provenance.get("model") or UNKNOWN)
