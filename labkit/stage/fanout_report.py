"""What a fan-out did (docs/fanout.md, "Running it" and "Trust"): every file on every node with its source and
how it was checked, what each file's copies were checked against, the servers' refusals by reason, and the
record the staging report keeps of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.stage.fanout import NAS, FanoutPlan


@dataclass(frozen=True)
class Fetched:
    """One file on one node: where its bytes came from, how fast, how it was verified, what failed first,
    and how many bytes of a crashed run's temp file it took over."""

    node: str
    name: str
    bytes: int
    seconds: float
    source: str
    sha256: str
    verified: str
    tried: tuple[str, ...] = ()
    adopted: int = 0

    @property
    def mb_per_s(self) -> float | None:
        return self.bytes / self.seconds / 1e6 if self.seconds > 0 else None


@dataclass
class FanoutReport:
    """What one fan-out did: every file on every node, each server's result (of the last round it served
    in), warnings, wall time; `trust` says per file what its copies were checked against, `refused` per
    node the requests its servers refused, by reason, over every round."""

    plan: FanoutPlan
    files: list[Fetched]
    servers: dict[str, dict]
    warnings: list[str]
    seconds: float
    trust: dict[str, str] = field(default_factory=dict)
    refused: dict[str, dict[str, int]] = field(default_factory=dict)

    def nas_reads(self) -> dict[str, list[str]]:
        """{file: nodes that read it from the NAS}, counting reads that failed part way."""
        out: dict[str, list[str]] = {}
        for f in self.files:
            if f.source == NAS or any(t.startswith(NAS + ":") for t in f.tried):
                out.setdefault(f.name, []).append(f.node)
        return out

    def wrong_tokens(self) -> int:
        """Requests refused for their token, on every server (an attempt by someone without one)."""
        return sum(k for by in self.refused.values() for why, k in by.items() if "token" in why)

    def record(self) -> dict:
        """The view's `fanout` entry in the staging record (StageReport.to_dict)."""
        return {
            "chains": self.plan.describe(),
            "nas_reads": self.nas_reads(),
            "seconds": self.seconds,
            "trust": dict(self.trust),
            "refused": {n: dict(by) for n, by in self.refused.items() if by},
            "wrong_tokens": self.wrong_tokens(),
        }

    def table(self) -> str:
        from tabulate import tabulate

        rows = [
            [f.node, f.name, f.source, f"{f.mb_per_s:.0f}" if f.mb_per_s else "-", f.verified, len(f.tried)]
            for f in self.files
        ]
        heads = ["node", "file", "from", "MB/s", "verified", "fallbacks"]
        notes = [f"  trust: {name}: {text}" for name, text in self.trust.items()]
        notes += [f"  note: {w}" for w in self.warnings]
        notes += [f"  note: {f.node} {f.name}: {t}" for f in self.files for t in f.tried]
        notes += refusal_notes(self.refused)
        return "\n".join([tabulate(rows, headers=heads), *notes, f"fan-out in {self.seconds:.1f} s"])


def refusal_notes(refused: dict[str, dict[str, int]]) -> list[str]:
    """One line per node whose servers refused requests: `refused by dgx5's server: 3 no or wrong token`."""
    return [
        f"  refused by {node}'s fan-out server: " + ", ".join(f"{k} {why}" for why, k in sorted(by.items()))
        for node, by in sorted(refused.items())
        if by
    ]


def add_refusals(into: dict[str, dict[str, int]], servers: dict[str, dict]) -> None:
    """Add each server result's refusals ({reason: count}) to `into` ({node: {reason: count}})."""
    for node, result in servers.items():
        by = result.get("refused")
        if isinstance(by, dict):
            mine = into.setdefault(node, {})
            for why, k in by.items():
                mine[str(why)] = mine.get(str(why), 0) + int(k)
