"""What one node needs, decided from its probe (pure: no I/O): which local files are verified, adopted or
(re)copied, which links are made, which leftovers go. Whether every node has the space for it is
labkit/stage/space.py; the view's other names (hand-made copies, other people's files) labkit/stage/handmade.py;
whole-file hashes labkit/stage/deep.py.

Content checks: sizes always; the blob name of every snapshot entry (recorded in the manifest: a copy of
another blob than the snapshot's, as after a new revision, is copied again, never adopted); sampled blocks
(labkit/stage/node/script.py `sample_offsets`: 8 blocks of 64 KiB per file - first, last, evenly spaced - or
the whole file when smaller) read on the node and hashed here with xxh3_64; `full=True` also hashes whole
files on the node (b2sum); `deep=True` compares the SHA-256 of each copy with its blob name. A flip outside
the sampled blocks is only found by `full` or `deep`. A file labkit did not make is never replaced or
removed unless named in `replace_foreign` (docs/staging.md, "Hand-made trees and other people's files").
The plan's staging entries are checked here too: staging refuses a bad plan even if the recipe layer was
bypassed.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from labkit.errors import LabkitError, RecipeError
from labkit.recipe import Invalid, LanePlan, StagingSpec, absolute_path, file_name
from labkit.stage.deep import copy_expect, deep_problem, kept_record, sampled_text
from labkit.stage.handmade import assess_others
from labkit.stage.node import script as node_side
from labkit.stage.sources import Source, sources_from
from labkit.stage.viewstate import VERIFY_MODES, Actions, FileState, Scope

MANIFEST_NAME = node_side.MANIFEST_NAME
PARTIAL_PREFIX = node_side.PARTIAL_PREFIX


_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def check_entry(plan: LanePlan, index: int, spec: StagingSpec) -> None:
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
        if spec.verify not in VERIFY_MODES:
            raise Invalid(f"{key}.verify", f"expected one of {', '.join(VERIFY_MODES)}, got {spec.verify!r}")
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
    kept: dict[str, FileState] = field(default_factory=dict)  # hand-made copies at other names (handmade.py)
    blobs: dict[str, str] = field(default_factory=dict)  # every snapshot file's blob name, by path
    deep: bool = False

    @property
    def need(self) -> int:
        return self.copy_bytes + self.min_free

    @property
    def margin(self) -> int:
        return self.free + self.reclaim - self.need

    @property
    def changes(self) -> bool:
        return bool(self.to_copy or self.to_link or self.to_remove)


def assess(
    probe: dict,
    spec: StagingSpec,
    block: int,
    count: int,
    full: bool,
    sources: dict[str, Source] | None = None,
    *,
    deep: bool = False,
    replace_foreign: Any = (),
) -> NodeAssessment:
    """Decide what one node needs, from its probe (pure; raises LabkitError naming node and path).

    `sources`: the source facts (from the probe that sent raw blocks; default: this probe). `deep`: the
    probe carries whole-file hashes (deep.hash_view). `replace_foreign`: names of files labkit did not make
    that the user allows it to replace; any other such file in the way is refused."""
    _refuse_unusable(probe, spec)
    if sources is None:
        sources = sources_from([probe], spec, block, count)
    scope = Scope(probe, spec, block, count, full, deep, frozenset(replace_foreign))
    acts = Actions()
    files, sources_full = _assess_local(scope, sources, acts)
    links, links_ok = assess_others(scope, acts)
    _assess_leftovers(probe, spec, acts)
    if acts.refusals:
        raise LabkitError(f"{probe['node']}: {acts.refusal()}")
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
        acts.kept,
        snapshot_blobs(probe["entries"]),
        deep,
    )


def snapshot_blobs(entries: dict) -> dict[str, str]:
    """{path below the snapshot: blob name} of every file in it that resolves into blobs/."""
    out = {}
    for name, e in entries.items():
        for rel, f in (e.get("tree") or {}).items() if e["kind"] == "dir" else [(name, e)]:
            if f.get("blob"):
                out[rel] = f["blob"]
    return dict(sorted(out.items()))


def _refuse_unusable(probe: dict, spec: StagingSpec) -> None:
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
    scope: Scope, sources: dict[str, Source], acts: Actions
) -> tuple[dict[str, FileState], dict[str, str]]:
    """Each local file: its state in the view against the source; copies and repairs go into `acts`."""
    probe, node, snapshot = scope.probe, scope.node, scope.probe["snapshot"]
    files: dict[str, FileState] = {}
    sources_full = {}
    for name in scope.spec.local:
        src, ref = probe["sources"][name], sources[name]
        if (
            src["size"] != ref.size
            or src["digest"] != ref.digest
            or src.get("blob") != ref.blob
            or (scope.full and src.get("full") != ref.full)
        ):
            raise LabkitError(
                f"{node}: {snapshot}/{name} reads differently here than on the other nodes "
                "(size, blob or sampled blocks); is the shared cache consistent?"
            )
        if src.get("full"):
            sources_full[name] = src["full"]
        have = scope.view(name)
        if have["state"] == "dir":
            raise LabkitError(
                f"{node}: {scope.dst}/{name} is a directory where the view needs a copy; remove it by hand"
            )
        f = FileState(name, ref.size, "copy", hashes=list(ref.hashes), full=src.get("full"), blob=ref.blob)
        if have["state"] != "missing":
            _judge_local(scope, f, have, acts)
        if f.status in ("copy", "repair"):
            item = {"name": name, "src": f"{snapshot}/{name}", "size": f.size}
            acts.to_copy.append({**item, "expect": copy_expect(f.blob)} if scope.deep else item)
        files[name] = f
    return files, sources_full


def _judge_local(scope: Scope, f: FileState, have: dict, acts: Actions) -> None:
    """Status of a local file present in the view: verified or adopted when it checks out; re-copied when it
    is labkit's copy (or a link) and does not; a file of someone else's that does not is refused unless named."""
    prev = scope.table("files").get(f.name)
    prev = prev if isinstance(prev, dict) else None
    problem = _content_problem(scope, f, have)
    if problem is None and scope.deep:
        problem = deep_problem(scope, f)
    stale = _stale(scope, f, prev) if prev is not None else None
    if problem is None and stale and not scope.deep:  # a deep hash equal to the blob's name outranks it
        problem = stale
    if problem is None:
        usable = (
            prev is not None
            and not stale
            and prev.get("size") == f.size
            and prev.get("xxh3_64") == f.hashes
            and prev.get("block") == scope.block
            and prev.get("count") == scope.count
            and (f.blob is not None or (scope.manifest or {}).get("commit") == scope.probe["commit"])
        )
        f.status, f.prev = ("verified", prev) if usable and prev is not None else ("adopted", {})
        if not scope.deep:
            f.deep = kept_record(prev, have, f.blob)
            f.check = sampled_text(f.size, scope.block, scope.count, full=scope.full)
        return
    f.status, f.reason = "repair", problem
    path = f"{scope.dst}/{f.name}"
    if prev is None and have["state"] != "link":
        if f.name not in scope.replace:
            acts.refuse_foreign(scope, f.name, problem, "delete it to copy the snapshot's file there")
            return
        acts.replace_foreign(scope, f.name, have, problem, "deleted and copied again")
    else:
        acts.problems.append(f"{scope.node}: {path} {problem}: re-copying (never used as is)")
        acts.reclaim += have.get("alloc", 0)
    acts.to_remove.append(f.name)


def _content_problem(scope: Scope, f: FileState, have: dict) -> str | None:
    """What is wrong with a local file's copy by type, size, sampled blocks and (full mode) whole hash."""
    if have["state"] != "file":
        target = f" -> {have['target']}" if have["state"] == "link" else ""
        return f"is a {have['state']}{target}, not a copy"
    if have["size"] != f.size:
        return f"has {have['size']} bytes, the source {f.size} (truncated or different file)"
    offsets = node_side.sample_offsets(f.size, scope.block, scope.count)
    bad = [off for off, same in zip(offsets, have["match"], strict=True) if not same]
    if bad:
        return (
            f"sampled block(s) at offset {', '.join(map(str, bad[:4]))}"
            f"{' ...' if len(bad) > 4 else ''} differ from the source"
        )
    if scope.full and have.get("full") != scope.probe["sources"][f.name].get("full"):
        return "full hash differs from the source"
    return None


def _stale(scope: Scope, f: FileState, prev: dict) -> str | None:
    """Why the manifest says the view's copy is of another blob than the snapshot's (None: same blob, or no
    blob names to go by). A manifest of an older labkit (no "blob") is read through its recorded source."""
    if f.blob is None:
        return None
    commit = scope.probe["commit"]
    if "blob" in prev:
        was = prev["blob"]
    elif (scope.manifest or {}).get("commit") == commit:
        return None
    else:
        was = scope.probe.get("legacy_blobs", {}).get(f.name)
        if was is None:
            return (
                f"was copied from {prev.get('source')} by an older labkit and which blob it is cannot be told "
                f"any more; the snapshot's {f.name} (commit {commit}) is blob {f.blob}"
            )
    if was == f.blob:
        return None
    return (
        f"is a copy of blob {was}; the snapshot's {f.name} (commit {commit}) is blob {f.blob}: a new revision"
    )


def _assess_leftovers(probe: dict, spec: StagingSpec, acts: Actions) -> None:
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
