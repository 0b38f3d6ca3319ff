"""What one node needs, decided from its probe (pure: no I/O): which local files are verified, adopted or
(re)copied, which links are made, which leftovers go. Whether every node has the space for it is
labkit/stage/space.py.

Content checks: sizes always; sampled blocks (labkit/stage/node/base.py `sample_offsets`: 8 blocks of
64 KiB per file - first, last, evenly spaced - or the whole file when smaller) read on the node and hashed
here with xxh3_64; `full=True` also hashes whole files on the node (b2sum). A flip outside the sampled
blocks is only found by `full`. The plan's staging entries are checked here too: staging refuses a bad plan
even if the recipe layer was bypassed.
"""

from __future__ import annotations

import base64
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

import xxhash

from labkit.errors import LabkitError, RecipeError
from labkit.recipe import Invalid, absolute_path, file_name
from labkit.stage.node import base as node_side

MANIFEST_NAME = node_side.MANIFEST_NAME
PARTIAL_PREFIX = node_side.PARTIAL_PREFIX


_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def check_entry(plan, index: int, spec) -> None:
    """Raise RecipeError (plan file + key) for any path in a staging entry that could escape its folder."""
    key = f"staging[{index}]"
    try:
        if spec.kind != "local-view":
            raise Invalid(f"{key}.kind", f"staging only knows kind 'local-view', got {spec.kind!r}")
        for name in ("dst", "mount"):
            value = getattr(spec, name)
            if absolute_path(value, f"{key}.{name}") != value or value == "/":
                raise Invalid(f"{key}.{name}", f"expected a normalised absolute path below /, got {value!r}")
        if not spec.local:
            raise Invalid(f"{key}.local", "must not be empty")
        for i, name in enumerate(spec.local):
            file_name(name, f"{key}.local[{i}]")
            if name == MANIFEST_NAME or name.startswith(PARTIAL_PREFIX):
                raise Invalid(f"{key}.local[{i}]", f"{name!r} is a name labkit reserves in the view")
        if not _REPO_RE.fullmatch(spec.repo) or ".." in spec.repo:
            raise Invalid(f"{key}.repo", f"expected 'org/name', got {spec.repo!r}")
        if not spec.revision or "/" in spec.revision or spec.revision in (".", ".."):
            raise Invalid(f"{key}.revision", f"expected a branch, tag or commit name, got {spec.revision!r}")
        if spec.min_free < 0:
            raise Invalid(f"{key}.min_free", "must not be negative")
        cache = plan.cluster.shared_cache
        if not cache:
            raise Invalid("cluster.shared_cache", "required to stage a local view")
        absolute_path(cache, "cluster.shared_cache")
        if (
            spec.dst == cache
            or spec.dst.startswith(cache.rstrip("/") + "/")
            or cache.startswith(spec.dst + "/")
        ):
            raise Invalid(f"{key}.dst", f"{spec.dst} overlaps the shared cache {cache}")
    except Invalid as e:
        raise RecipeError(plan.file, e.key, e.message)


def repo_cache_path(shared_cache: str, repo: str) -> str:
    """The repo's folder in an HF hub cache: <shared_cache>/models--org--name."""
    return f"{shared_cache.rstrip('/')}/models--{repo.replace('/', '--')}"


@dataclass
class FileState:
    """One local file on one node: what the probe found and what happens to it."""

    name: str
    size: int
    status: str  # verified | adopted | copy | repair
    reason: str = ""
    hashes: list[str] = field(default_factory=list)  # xxh3_64 of the sampled blocks (source)
    full: str | None = None


@dataclass
class NodeAssessment:
    """One node's view as `assess` judged it: what to copy, link and remove, and the space that takes."""

    node: str
    commit: str
    snapshot: str
    files: dict[str, FileState]
    links: dict[str, str]  # name -> absolute target, every non-local snapshot entry
    to_copy: list[dict]
    to_link: list[dict]
    to_remove: list[str]
    copy_bytes: int  # local files to copy (missing or invalid)
    min_free: int  # to stay free on dst's filesystem after staging
    free: int
    reclaim: int
    fs_path: str
    fs_dev: int
    links_ok: int
    problems: list[str]  # mismatches found (each is repaired)
    warnings: list[str]
    manifest: dict | None
    sources_full: dict[str, str]

    @property
    def need(self) -> int:
        return self.copy_bytes + self.min_free

    @property
    def margin(self) -> int:
        return self.free + self.reclaim - self.need

    @property
    def changes(self) -> bool:
        return bool(self.to_copy or self.to_link or self.to_remove)


def sample_hashes(raw_b64: str, size: int, block: int, count: int) -> list[str]:
    """xxh3_64 hex digest of each sampled block (the blocks come concatenated from the node)."""
    raw = base64.b64decode(raw_b64)
    offsets = node_side.sample_offsets(size, block, count)
    lengths = node_side.block_lengths(size, offsets, block)
    if sum(lengths) != len(raw):
        raise LabkitError(f"sampled bytes: got {len(raw)}, expected {sum(lengths)} for a {size}-byte file")
    out, pos = [], 0
    for n in lengths:
        out.append(xxhash.xxh3_64_hexdigest(raw[pos : pos + n]))
        pos += n
    return out


@dataclass(frozen=True)
class Source:
    """One local file as found in the shared cache: size, xxh3_64 of each sampled block, digest of the raw
    samples (to compare what each node read), whole-file hash in full mode."""

    size: int
    hashes: tuple[str, ...]
    digest: str
    full: str | None


def sources_from(probes: list[dict], spec, block: int, count: int) -> dict[str, Source]:
    """The source facts of each local file, from whichever probe carried its raw sampled blocks."""
    out = {}
    for name in spec.local:
        for probe in probes:
            src = probe["sources"].get(name)
            if src is not None and "samples" in src:
                out[name] = Source(
                    src["size"],
                    tuple(sample_hashes(src["samples"], src["size"], block, count)),
                    src["digest"],
                    src.get("full"),
                )
                break
        else:
            if all(name in p["sources"] for p in probes):
                raise LabkitError(f"{probes[0]['node']}: no probe returned the sampled blocks of {name}")
    return out


@dataclass
class _Actions:
    """What one node's view needs, collected in probe order (the node script removes in list order)."""

    to_copy: list[dict] = field(default_factory=list)
    to_link: list[dict] = field(default_factory=list)
    to_remove: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    reclaim: int = 0


def assess(
    probe: dict, spec, block: int, count: int, full: bool, sources: dict[str, Source] | None = None
) -> NodeAssessment:
    """Decide what one node needs, from its probe (pure; raises LabkitError naming node and path).

    `sources`: the source facts (from the probe that sent raw blocks; default: this probe)."""
    _refuse_unusable(probe, spec)
    if sources is None:
        sources = sources_from([probe], spec, block, count)
    acts = _Actions()
    files, sources_full = _assess_local(probe, spec, block, count, full, sources, acts)
    links, links_ok = _assess_links(probe, spec, files, acts)
    _assess_leftovers(probe, spec, acts)
    return NodeAssessment(
        probe["node"],
        probe["commit"],
        probe["snapshot"],
        files,
        links,
        acts.to_copy,
        acts.to_link,
        acts.to_remove,
        sum(c["size"] for c in acts.to_copy),
        spec.min_free,
        probe["free"],
        acts.reclaim,
        probe["fs_path"],
        probe["fs_dev"],
        links_ok,
        acts.problems,
        acts.warnings,
        probe["manifest"],
        sources_full,
    )


def _refuse_unusable(probe: dict, spec) -> None:
    """A dangling cache entry, a local file missing from the snapshot or not a file, a dst that is no folder."""
    node, snapshot = probe["node"], probe["snapshot"]
    entries = probe["entries"]
    for e in entries.values():
        if e["kind"] == "broken":
            raise LabkitError(f"{node}: the shared cache has a dangling entry: {e['error']}")
    for name in spec.local:
        if name not in entries:
            raise LabkitError(f"{node}: {name} (in staging.local) is not in the snapshot {snapshot}")
        if entries[name]["kind"] != "file":
            raise LabkitError(
                f"{node}: {name} (in staging.local) is a directory in {snapshot}; only files are copied"
            )
    if probe["dst_state"] not in ("missing", "dir"):
        raise LabkitError(f"{node}: {spec.dst} exists and is not a directory ({probe['dst_state']})")


def _assess_local(
    probe: dict, spec, block: int, count: int, full: bool, sources: dict[str, Source], acts: _Actions
) -> tuple[dict[str, FileState], dict[str, str]]:
    """Each local file: its state in the view against the source; copies and repairs go into `acts`."""
    node, snapshot = probe["node"], probe["snapshot"]
    view, manifest = probe["view"], probe["manifest"]
    old = (manifest or {}).get("files", {}) if (manifest or {}).get("commit") == probe["commit"] else {}
    old = old if isinstance(old, dict) else {}  # a damaged manifest gives no prior entries, not a crash
    files: dict[str, FileState] = {}
    sources_full = {}
    for name in spec.local:
        src, ref = probe["sources"][name], sources[name]
        if src["size"] != ref.size or src["digest"] != ref.digest or (full and src.get("full") != ref.full):
            raise LabkitError(
                f"{node}: {snapshot}/{name} reads differently here than on the other nodes "
                "(size or sampled blocks); is the shared cache consistent?"
            )
        size, hashes = ref.size, list(ref.hashes)
        if src.get("full"):
            sources_full[name] = src["full"]
        have = view.get(name, {"state": "missing"})
        if have["state"] == "dir":
            raise LabkitError(
                f"{node}: {spec.dst}/{name} is a directory where the view needs a copy; remove it by hand"
            )
        status, reason = _file_status(have, size, hashes, src, old.get(name, {}), block, count, full)
        if status in ("copy", "repair"):
            acts.to_copy.append({"name": name, "src": f"{snapshot}/{name}", "size": size})
        if status == "repair":
            acts.problems.append(f"{node}: {spec.dst}/{name} {reason}: re-copying (never used as is)")
            acts.to_remove.append(name)
            acts.reclaim += have.get("alloc", 0)
        files[name] = FileState(name, size, status, reason, hashes, src.get("full"))
    return files, sources_full


def _file_status(
    have: dict, size: int, hashes: list[str], src: dict, prev: dict, block: int, count: int, full: bool
) -> tuple[str, str]:
    """(status, reason) of one local file in the view (not a directory): copy, repair, verified or adopted."""
    if have["state"] == "missing":
        return "copy", ""
    if have["state"] != "file":
        return "repair", f"is a {have['state']}, not a copy"
    if have["size"] != size:
        return "repair", f"has {have['size']} bytes, the source {size} (truncated or different file)"
    bad = [
        off
        for off, same in zip(node_side.sample_offsets(size, block, count), have["match"], strict=True)
        if not same
    ]
    if bad:
        return "repair", (
            f"sampled block(s) at offset {', '.join(map(str, bad[:4]))}"
            f"{' ...' if len(bad) > 4 else ''} differ from the source"
        )
    if full and have.get("full") != src.get("full"):
        return "repair", "full hash differs from the source"
    same = (
        prev.get("size") == size
        and prev.get("xxh3_64") == hashes
        and prev.get("block") == block
        and prev.get("count") == count
    )
    return ("verified" if same else "adopted"), ""


def _assess_links(
    probe: dict, spec, files: dict[str, FileState], acts: _Actions
) -> tuple[dict[str, str], int]:
    """Every other snapshot entry is an absolute link into the snapshot: ({name: target}, links already right)."""
    node, snapshot, view = probe["node"], probe["snapshot"], probe["view"]
    links, links_ok = {}, 0
    for name in probe["entries"]:
        if name in files:
            continue
        target = f"{snapshot}/{name}"
        links[name] = target
        have = view.get(name, {"state": "missing"})
        if have["state"] == "link" and have["target"] == target:
            links_ok += 1
            continue
        if have["state"] == "dir":
            raise LabkitError(
                f"{node}: {spec.dst}/{name} is a directory where the view needs a link; remove it by hand"
            )
        if have["state"] == "file":
            acts.reclaim += have.get("alloc", 0)
        acts.to_link.append({"name": name, "target": target})
    return links, links_ok


def _assess_leftovers(probe: dict, spec, acts: _Actions) -> None:
    """Partial copies go; of the entries not in the snapshot only labkit's own stale links go, the rest stay."""
    node = probe["node"]
    for p in probe["partials"]:
        acts.to_remove.append(p["name"])
        acts.reclaim += p["alloc"]
        acts.warnings.append(f"{node}: removing {spec.dst}/{p['name']} left by an interrupted stage")
    owned = view_owned_names(probe["manifest"])
    repo_dir = posixpath.dirname(posixpath.dirname(probe["snapshot"]))  # <shared_cache>/models--org--name
    for name, have in probe["extra"].items():
        if have["state"] == "link" and (name in owned or _points_into(have["target"], repo_dir)):
            acts.to_remove.append(name)
            acts.warnings.append(
                f"{node}: removing stale link {spec.dst}/{name} (not in snapshot {probe['commit']})"
            )
        elif have["state"] == "link":
            why = "the view's manifest does not list it" if owned else f"{spec.dst} has no labkit manifest"
            acts.warnings.append(
                f"{node}: {spec.dst}/{name} -> {have['target']} is not part of snapshot "
                f"{probe['commit']} and not labkit's ({why}); left in place"
            )
        else:
            acts.warnings.append(
                f"{node}: {spec.dst}/{name} is not part of snapshot {probe['commit']}; left in place"
            )


def view_owned_names(manifest: Any) -> set[str]:
    """Names a labkit manifest records as made by staging (its links and copies); empty for a folder without
    a valid manifest, whose entries are someone else's (e.g. a mistyped dst holding the user's model links)."""
    if not isinstance(manifest, dict) or manifest.get("kind") != "local-view":
        return set()
    links, files = manifest.get("links"), manifest.get("files")
    return set(links if isinstance(links, dict) else ()) | set(files if isinstance(files, dict) else ())


def _points_into(target: str, folder: str) -> bool:
    """True for an absolute link target inside `folder` (after normalising any '..')."""
    return target.startswith("/") and posixpath.normpath(target).startswith(folder.rstrip("/") + "/")
