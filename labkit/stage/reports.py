"""What a stage tells people while it runs and after: one copy progress bar over all nodes, and the report
per view and node (`StageReport.table()` for the terminal, `to_dict()` for run records).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import asdict, dataclass, field

from labkit import settings
from labkit.stage.fanout import NAS
from labkit.stage.fanout_report import refusal_notes
from labkit.stage.transport import EventSink
from labkit.units import format_size


@dataclass
class NodeReport:
    """What one stage did on one node: counts by outcome, bytes and seconds copied, notes."""

    node: str
    commit: str
    copied: int = 0
    adopted: int = 0
    verified: int = 0
    linked: int = 0  # links created or replaced this run
    removed: int = (
        0  # leftovers deleted this run (partial copies, stale links); a re-copied file counts as copied
    )
    links_ok: int = 0  # links already correct
    kept: int = 0  # copies made by hand at names the view would link, checked and kept as they are
    bytes_copied: int = 0
    cache_dropped: int = (
        0  # bytes of copies (and their sources) whose page cache the node dropped after copying
    )
    copy_seconds: float = 0.0
    seconds: float = 0.0  # whole stage on this node (probe, build, verify)
    repaired: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    # the check each file on the node's disk had, by path in the view: "sampled xxh3 8 blocks", "deep sha256",
    # "deep sha256 (cached, size+mtime+ctime unchanged)", ... (labkit/stage/deep.py)
    verification: dict[str, str] = field(default_factory=dict)
    # where each file copied in this stage came from: "nas" (the shared cache) or the peer node it was pulled
    # from (docs/fanout.md)
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def mb_per_s(self) -> float | None:
        return self.bytes_copied / self.copy_seconds / 1e6 if self.copy_seconds > 0 else None


@dataclass
class ViewReport:
    """One view on every node: its preflight rows, a NodeReport per node, where the manifest was written."""

    dst: str
    repo: str
    revision: str
    commit: str
    full: bool
    preflight: list[dict]
    nodes: dict[str, NodeReport]
    manifest_written: dict[str, bool]
    verify: str = "sampled"  # sampled | deep (--deep or staging.verify)
    # a fan-out's chains ("name: nas -> n1 -> n2"), {file: nodes that read it from the NAS}, seconds, {file:
    # what its copies were checked against} ("trust"), {node: {reason: requests its server refused}} and the
    # count of wrong-token requests; None when the copies were independent (docs/fanout.md, "Trust")
    fanout: dict | None = None

    @property
    def verification_only(self) -> bool:
        return all(
            n.copied == 0 and n.linked == 0 and n.removed == 0 for n in self.nodes.values()
        ) and not any(self.manifest_written.values())


@dataclass
class StageReport:
    """What `stage` did, per view and node; `table()` for people, `to_dict()` for run records."""

    views: list[ViewReport]
    seconds: float

    @property
    def verification_only(self) -> bool:
        return all(v.verification_only for v in self.views)

    def to_dict(self) -> dict:
        views = []
        for v in self.views:
            d = asdict(v)
            for name, n in v.nodes.items():
                d["nodes"][name]["mb_per_s"] = n.mb_per_s
            views.append(d)
        return {"seconds": self.seconds, "verification_only": self.verification_only, "views": views}

    def table(self) -> str:
        from tabulate import tabulate

        parts = []
        for v in self.views:
            rows = [
                [
                    n.node,
                    n.copied,
                    n.adopted,
                    n.verified,
                    n.kept,
                    n.linked + n.links_ok,
                    n.removed,
                    format_size(n.bytes_copied),
                    f"{n.seconds:.1f}",
                    f"{n.mb_per_s:.0f}" if n.mb_per_s else "-",
                ]
                for n in v.nodes.values()
            ]
            parts.append(
                f"view {v.dst} ({v.repo}@{v.revision} = {v.commit[:12]}{', full hashes' if v.full else ''})"
            )
            parts.append(
                tabulate(
                    rows,
                    headers=[
                        "node",
                        "copied",
                        "adopted",
                        "verified",
                        "kept",
                        "links",
                        "removed",
                        "bytes copied",
                        "seconds",
                        "copy MB/s",
                    ],
                )
            )
            notes = [m for n in v.nodes.values() for m in n.repaired + n.warnings]
            parts += [f"  note: {m}" for m in notes]
            parts += _cache_lines(v)
            parts += [f"  checked: {line}" for line in _checks(v)]
            parts += _fanout_lines(v.fanout)
        parts.append(
            "verification only: nothing copied or changed"
            if self.verification_only
            else f"staged in {self.seconds:.1f} s"
        )
        return "\n".join(parts)


def _cache_lines(v: ViewReport) -> list[str]:
    """How much of what each node copied from the NAS had its page cache dropped (docs/staging.md, "The page
    cache a copy leaves"); nothing when nothing was copied from it."""
    nas = {n.node: n for n in v.nodes.values() if NAS in n.sources.values()}
    if not nas:
        return []
    said = ", ".join(f"{name} {format_size(n.cache_dropped)}" for name, n in sorted(nas.items()))
    return [f"  page cache dropped after copying (copies and their NAS sources): {said}"]


def _fanout_lines(fanout: dict | None) -> list[str]:
    """What a fan-out's copies were checked against, per file, and what its servers refused."""
    if not fanout:
        return []
    out = [f"  fan-out trust: {name}: {text}" for name, text in sorted((fanout.get("trust") or {}).items())]
    return out + refusal_notes(fanout.get("refused") or {})


def _checks(v: ViewReport) -> list[str]:
    """How the files were checked, counted over the nodes: "deep sha256: 8 files", ..."""
    counts: dict[str, int] = {}
    for n in v.nodes.values():
        for text in n.verification.values():
            counts[text] = counts.get(text, 0) + 1
    return [f"{text}: {k} file{'s' if k != 1 else ''}" for text, k in sorted(counts.items())]


class CopyProgress:
    """Aggregate copy progress over nodes: one tqdm bar on stderr (throttled), thread-safe."""

    def __init__(self, total: int, enabled: bool = True):
        self.total = total
        self._done: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._from: dict[str, str] = {}  # node -> "node<-source rate" of its latest fan-out progress
        self._bar = None
        if enabled and total > 0:
            from tqdm import tqdm

            from labkit.progress import BATCH_BAR_COLUMNS, bar_interval

            batch = settings.current().batch == "1"
            self._bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                desc="staging copy",
                file=sys.stderr,
                mininterval=bar_interval() if batch else 0.5,
                ncols=BATCH_BAR_COLUMNS if batch else None,
                leave=True,
            )

    def sink(self, node: str) -> EventSink:
        def on_event(ev: dict) -> None:
            if ev.get("event") != "progress":
                return
            with self._lock:
                key = (node, str(ev.get("name")))
                delta = int(ev.get("done", 0)) - self._done.get(key, 0)
                self._done[key] = int(ev.get("done", 0))
                if self._bar is not None and delta:
                    self._bar.update(delta)

        return on_event

    def peer_sink(self, node: str) -> EventSink:
        """A fan-out's events of `node` (docs/fanout.md, "Protocol"): its pulls' progress counted as copies,
        their source and rate shown beside the bar, each fallback a line; the servers' own events ignored."""
        counted = self.sink(node)

        def on_event(ev: dict) -> None:
            if ev.get("role") == "server":
                return
            if ev.get("event") == "fallback":
                self.write(
                    f"labkit: {node} {ev.get('name')}: {ev.get('source')} failed at {ev.get('at')} bytes "
                    f"({ev.get('why')}); trying the next source"
                )
            elif ev.get("event") == "progress":
                counted(ev)
                with self._lock:
                    rate = float(ev.get("rate") or 0)
                    self._from[node] = f"{node}<-{ev.get('source')} {rate / 1e6:.0f} MB/s"
                    if self._bar is not None:
                        self._bar.set_postfix_str(", ".join(v for _, v in sorted(self._from.items())))

        return on_event

    @property
    def done(self) -> int:
        return sum(self._done.values())

    def write(self, text: str) -> None:
        """A line of its own on stderr, above the bar (which is drawn again below it)."""
        if self._bar is not None:
            from tqdm import tqdm

            tqdm.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
