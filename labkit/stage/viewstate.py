"""The terms one node's assessment is made in (pure data): what it goes by (`Scope`: the probe, the plan's
entry, the checks asked for), what it found per file (`FileState`) and what it collects to do (`Actions`).
Shared by assess.py (the local files), handmade.py (the other names) and deep.py (whole-file hashes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.recipe import StagingSpec

VERIFY_MODES = ("sampled", "deep")


@dataclass
class FileState:
    """One file kept on a node's disk (a local copy, or a hand-made copy at another name): what the probe
    found, what happens to it and how it was checked."""

    name: str  # path below the view ("model-00047-of-00048.safetensors", "original/params.json")
    size: int
    status: str  # verified | adopted | copy | repair
    reason: str = ""
    hashes: list[str] = field(default_factory=list)  # xxh3_64 of the sampled blocks (source); local files
    full: str | None = None
    blob: str | None = None  # the blob the snapshot's entry resolves to (its SHA-256 for LFS files)
    prev: dict = field(default_factory=dict)  # the manifest's entry, when it still vouches for this file
    deep: dict | None = None  # the whole-file hash on record (manifest form, deep.py), while it holds
    check: str = ""  # what the staging record calls the check it had (deep.py check texts)


@dataclass(frozen=True)
class Scope:
    """What one node's assessment goes by: its probe, the plan's staging entry and the checks asked for."""

    probe: dict
    spec: StagingSpec
    block: int
    count: int
    full: bool
    deep: bool
    replace: frozenset[str]  # names the user allowed staging to replace (--replace-foreign)

    @property
    def node(self) -> str:
        return self.probe["node"]

    @property
    def dst(self) -> str:
        return self.spec.dst

    @property
    def manifest(self) -> dict | None:
        """The view's labkit manifest, or None for a folder without a valid one (someone else's)."""
        m = self.probe["manifest"]
        return m if isinstance(m, dict) and m.get("kind") == "local-view" else None

    def table(self, key: str) -> dict:
        """A table of the manifest ("files", "kept", "links"); {} when absent or damaged."""
        value = (self.manifest or {}).get(key)
        return value if isinstance(value, dict) else {}

    def view(self, name: str) -> dict:
        return self.probe["view"].get(name, {"state": "missing"})

    def not_ours(self) -> str:
        """Why an entry is not labkit's: the words for a refusal or a note."""
        if self.manifest is None:
            return f"{self.dst} has no labkit manifest"
        return "the view's manifest does not list it as labkit's"


@dataclass
class Actions:
    """What one node's view needs, collected in probe order (the node script removes in list order);
    `refusals` end the assessment (nothing is changed on any node)."""

    to_copy: list[dict] = field(default_factory=list)
    to_link: list[dict] = field(default_factory=list)
    to_remove: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    replaceable: list[str] = field(default_factory=list)  # refused names that --replace-foreign would allow
    kept: dict[str, FileState] = field(default_factory=dict)
    reclaim: int = 0

    def refuse_foreign(self, scope: Scope, rel: str, problem: str, action: str) -> None:
        """A file labkit did not make would be replaced or removed: refused, naming the file."""
        self.refusals.append(
            f"{scope.dst}/{rel} is not labkit's ({scope.not_ours()}) and {problem}: staging would {action}"
        )
        self.replaceable.append(rel)

    def refusal(self) -> str:
        """The refusals as one message, ending with the flag that would allow what can be allowed."""
        text = "; ".join(self.refusals)
        if self.replaceable:
            flags = " ".join(f"--replace-foreign {n}" for n in self.replaceable)
            text += (
                f". Nothing was changed on any node; to let staging replace {'it' if len(self.replaceable) == 1 else 'them'}, "
                f"name {'it' if len(self.replaceable) == 1 else 'each'}: {flags} (stage(..., replace_foreign={self.replaceable!r}))"
            )
        return text

    def replace_foreign(self, scope: Scope, rel: str, have: dict, problem: str, action: str) -> None:
        """A file labkit did not make, named by the user: it goes, and the report says so."""
        self.warnings.append(
            f"{scope.node}: {scope.dst}/{rel} ({scope.not_ours()}; {problem}): {action}, "
            f"as --replace-foreign {rel} allows"
        )
        self.reclaim += have.get("alloc", 0)
