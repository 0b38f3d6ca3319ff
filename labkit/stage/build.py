"""Step 3 on one node, and the manifest that closes step 4: the build call (remove, link, copy) with what it
did recorded in the node's report, the tally of copied/verified/adopted files, and the view's manifest,
written only when it changed (a second run then touches nothing).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from labkit.errors import LabkitError
from labkit.recipe import StagingSpec
from labkit.stage.assess import MANIFEST_NAME, NodeAssessment
from labkit.stage.deep import as_record, copy_text, expected
from labkit.stage.fanout import NAS
from labkit.stage.node import script as node_side
from labkit.stage.reports import NodeReport
from labkit.stage.transport import EventSink, HostLike, NodeJobs, Timeouts, call_node
from labkit.stage.viewstate import FileState

MANIFEST_FORMAT = 2  # 2: blob names of every file, hand-made copies kept ("kept"), deep hashes


def build_node(
    h: HostLike,
    spec: StagingSpec,
    a: NodeAssessment,
    rep: NodeReport,
    *,
    block: int,
    count: int,
    full: bool,
    copy_rate: float | None,
    on_event: EventSink,
    timeouts: Timeouts,
    jobs: NodeJobs,
    copy: bool = True,
) -> dict[str, dict]:
    """Make the changes `a` lists on the node (one build call); the counts go into `rep`. {name: copy}.
    `copy=False`: only the removals and links (a fan-out delivers the copies)."""
    # Full mode hashes each copy and its source whole after copying: the bytes are read 3 times; deep mode
    # hashes each copy once more (and its source, when it has no blob name).
    to_copy = a.to_copy if copy else []
    work = sum(c["size"] * _reads(c, full) for c in to_copy)
    request = {
        "dst": spec.dst,
        "remove": a.to_remove,
        "copy": to_copy,
        "link": a.to_link,
        "block": block,
        "count": count,
        "full": full,
    }
    if copy_rate:
        request["rate"] = copy_rate
    built = call_node(h, "build", request, on_event=on_event, timeout=timeouts.for_bytes(work), jobs=jobs)
    if built["errors"]:
        raise LabkitError("; ".join(built["errors"]))
    copied = {c["name"]: c for c in built["copied"]}
    rep.linked = built["linked"]
    copying = {c["name"] for c in a.to_copy}
    rep.removed = sum(1 for name in built["removed"] if name not in copying)
    rep.bytes_copied = sum(c["bytes"] for c in built["copied"])
    rep.cache_dropped = sum(c.get("cache_dropped", 0) for c in built["copied"])
    rep.copy_seconds = sum(c["seconds"] for c in built["copied"])
    rep.methods = sorted({c["method"] for c in built["copied"]})
    rep.sources.update({name: NAS for name in copied})
    return copied


def received_copies(rep: NodeReport, a: NodeAssessment, fetched: Mapping, view: dict, deep: bool) -> dict:
    """The files a fan-out delivered to this node ({name: Fetched}) as build's copy entries, their sources,
    fallbacks, bytes and seconds into `rep` (docs/fanout.md, "Running it"). In deep mode a file whose SHA-256,
    checked on receipt, is its blob name gets that as its deep record, with the final file's times from
    `view` (the probe after the fan-out)."""
    copied = {}
    for name, f in fetched.items():
        entry = {"name": name, "bytes": f.bytes, "seconds": f.seconds, "method": "fan-out", "full": None}
        st = view.get(name, {})
        if deep and f.sha256 == a.files[name].blob and st.get("state") == "file":
            times = {k: st[k] for k in ("size", "mtime_ns", "ctime_ns")}
            entry["deep"] = {"algo": "sha256", "hex": f.sha256, **times}
        copied[name] = entry
        rep.sources[name] = f.source
        rep.warnings += [f"{name}: {t}; received from {f.source} instead" for t in f.tried]
    rep.bytes_copied += sum(f.bytes for f in fetched.values())
    rep.copy_seconds += sum(f.seconds for f in fetched.values())
    rep.methods = sorted({*rep.methods, *(["fan-out"] if fetched else [])})
    return copied


def node_warnings(warnings: list[str], nodes: list[str]) -> dict[str, list[str]]:
    """A fan-out's warnings by node: one that begins "<node>:" is that node's, any other every node's."""
    out: dict[str, list[str]] = {n: [] for n in nodes}
    for w in warnings:
        head = w.split(":", 1)[0]
        for n in nodes:
            if head == n or head not in out:
                out[n].append(w)
    return out


def _reads(item: dict, full: bool) -> int:
    """How often one copy's bytes are read whole by a build: the copy, full mode's two hashes, deep's."""
    expect = item.get("expect")
    return 1 + (2 if full else 0) + (0 if not expect else 1 if expect.get("hex") else 2)


def tally_files(
    rep: NodeReport, a: NodeAssessment, copied: dict[str, dict], block: int, count: int, full: bool
) -> None:
    """Count the view's links already right and its local files by what happened to them, into `rep`, with
    the check each file had (the staging record says it per file)."""
    rep.links_ok = len(a.links) - rep.linked
    for name, f in a.files.items():
        if name in copied:
            rep.copied += 1
            rep.verification[name] = copy_text(f, a.deep, block, count, full)
            continue
        if f.status == "verified":
            rep.verified += 1
        else:
            rep.adopted += 1
        rep.verification[name] = f.check
    rep.kept = len(a.kept)
    rep.verification.update({rel: k.check for rel, k in sorted(a.kept.items())})


def _state(f: FileState, now: str) -> dict:
    """state and time of an entry the stage did not copy: a verified one keeps its own."""
    if f.status == "verified":
        return {"state": f.prev.get("state", "adopted"), "at": f.prev.get("at", now)}
    return {"state": "adopted", "at": now}


def build_manifest(
    spec: StagingSpec,
    shared_cache: str | None,
    a: NodeAssessment,
    copied: dict[str, dict],
    block: int,
    count: int,
    now: str,
) -> dict:
    """The manifest for one node's view (pure); unchanged entries keep their original state and time."""
    files = {}
    for name, f in a.files.items():
        entry = {
            "size": f.size,
            "block": block,
            "count": count,
            "offsets": node_side.sample_offsets(f.size, block, count),
            "xxh3_64": f.hashes,
            "source": f"{a.snapshot}/{name}",
            "blob": f.blob,
        }
        if name in copied:
            entry.update(state="copied", at=now)
            full = copied[name].get("full")
            found = copied[name].get("deep")
            deep = as_record(found, now) if found and expected(f.blob) else None
        else:
            entry.update(_state(f, now))
            full = f.full or f.prev.get("full")
            deep = f.deep
        if full:
            entry["full"] = full
        if deep:
            entry["deep"] = deep
        files[name] = entry
    kept = {}
    for rel, f in sorted(a.kept.items()):
        kept[rel] = {"size": f.size, "source": f"{a.snapshot}/{rel}", "blob": f.blob, **_state(f, now)}
        if f.deep:
            kept[rel]["deep"] = f.deep
    return {
        "format": MANIFEST_FORMAT,
        "kind": "local-view",
        "repo": spec.repo,
        "revision": spec.revision,
        "commit": a.commit,
        "snapshot": a.snapshot,
        "shared_cache": shared_cache,
        "dst": spec.dst,
        # the rule's text is part of every manifest: changing it rewrites them all (format 2 did, once)
        "sampling": {
            "block": block,
            "count": count,
            "hash": "xxh3_64",
            "rule": "first, last and evenly spaced blocks (whole file if size <= block*count); "
            "see labkit/stage/node/script.py sample_offsets",
        },
        "files": files,
        "kept": kept,
        "links": dict(sorted(a.links.items())),
        "blobs": a.blobs,
    }


def _same_manifest(old: dict | None, new: dict) -> bool:
    return old is not None and {k: v for k, v in old.items() if k != "updated"} == new


def write_manifest(
    h: HostLike, dst: str, manifest: dict, old: dict | None, now: str, timeout: float, jobs: NodeJobs
) -> bool:
    """Write `manifest` into the view on the node unless it equals `old` (its time aside); True if written."""
    if _same_manifest(old, manifest):
        return False
    text = json.dumps({**manifest, "updated": now}, indent=1) + "\n"
    call_node(h, "write", {"dst": dst, "name": MANIFEST_NAME, "text": text}, timeout=timeout, jobs=jobs)
    return True
