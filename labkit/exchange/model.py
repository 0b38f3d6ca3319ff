"""What an import reads out of one result of another tool, before anything is stored: the tool and its
version as the file gives them, the setting it measured (concurrency, prompt and output lengths, depth), its
figures under their own names and units, and the provenance the file carries ("unknown" for the rest).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from labkit.store import UNKNOWN, tool_label

# a file labkit export wrote: the tool's fields computed by labkit from its own stamps, not the tool's measurement
EXPORTER = "labkit export"
EXPORT_VERSION = "labkit-"  # llama-benchy's `version` of an export: labkit-<labkit version>
EXPORT_RUN_KEY = "labkit_run_id"  # the text key (a --metadata pair) naming the run in a vllm-bench export


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
    phase: str | None = None  # a result that is not a measurement of its own: "context-load"
    # the lengths are means per request of the tokens the file counted, since it names no configured length
    # (vllm bench serve): never a labkit prefill_<P>, and named in/out in the variant, not pp/tg
    counted: bool | None = None

    def variant_id(self, fmt: str) -> str:
        """The stored lane's variant: the format and what sets its figures apart (c2, pp512, d4096, r4)."""
        parts = [fmt]
        pp, tg = ("in", "out") if self.counted else ("pp", "tg")
        for prefix, value in (
            ("c", self.concurrency),
            (pp, self.prompt_tokens),
            (tg, self.output_tokens),
        ):
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
        """What one result measured, as a comparison checks it: every setting but the number of requests,
        which says how long it ran, not what (as labkit's own repetition settings)."""
        return {k: v for k, v in self.to_dict().items() if k != "requests"}

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
    # who computed the tool's fields when the tool did not measure them ("labkit export"): its definitions
    # then get ids of their own, so the gate never takes the file for the tool's own measurement
    applied_by: str = ""

    @property
    def tool_label(self) -> str:
        """The tool and its version as the file gives it (store.tool_label)."""
        return tool_label(self.tool, self.tool_version)

    @property
    def model(self) -> str:
        return str(self.provenance.get("model") or UNKNOWN)
