"""Step 3 on one node, and the manifest that closes step 4: the build call (remove, link, copy) with what it
did recorded in the node's report, the tally of copied/verified/adopted files, and the view's manifest,
written only when it changed (a second run then touches nothing).
"""

from __future__ import annotations

import json

from labkit.errors import LabkitError
from labkit.stage.assess import MANIFEST_NAME, NodeAssessment
from labkit.stage.node import base as node_side
from labkit.stage.reports import NodeReport
from labkit.stage.transport import EventSink, HostLike, NodeJobs, Timeouts, call_node

MANIFEST_FORMAT = 1


def build_node(
    h: HostLike,
    spec,
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
) -> dict[str, dict]:
    """Make the changes `a` lists on the node (one build call); the counts go into `rep`. {name: copy}."""
    # Full mode hashes each copy and its source whole after copying: the bytes are read 3 times.
    work = sum(c["size"] for c in a.to_copy) * (3 if full else 1)
    request = {
        "dst": spec.dst,
        "remove": a.to_remove,
        "copy": a.to_copy,
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
    rep.removed = sum(1 for name in built["removed"] if name not in copied)
    rep.bytes_copied = sum(c["bytes"] for c in built["copied"])
    rep.copy_seconds = sum(c["seconds"] for c in built["copied"])
    rep.methods = sorted({c["method"] for c in built["copied"]})
    return copied


def tally_files(rep: NodeReport, a: NodeAssessment, copied: dict[str, dict]) -> None:
    """Count the view's links already right and its local files by what happened to them, into `rep`."""
    rep.links_ok = len(a.links) - rep.linked
    for name, f in a.files.items():
        if name in copied:
            rep.copied += 1
        elif f.status == "verified":
            rep.verified += 1
        else:
            rep.adopted += 1


def build_manifest(
    spec, shared_cache: str, a: NodeAssessment, copied: dict[str, dict], block: int, count: int, now: str
) -> dict:
    """The manifest for one node's view (pure); unchanged entries keep their original state and time."""
    old_files = (a.manifest or {}).get("files", {}) if (a.manifest or {}).get("commit") == a.commit else {}
    files = {}
    for name, f in a.files.items():
        entry = {
            "size": f.size,
            "block": block,
            "count": count,
            "offsets": node_side.sample_offsets(f.size, block, count),
            "xxh3_64": f.hashes,
            "source": f"{a.snapshot}/{name}",
        }
        if name in copied:
            entry.update(state="copied", at=now)
            full = copied[name].get("full")
        elif f.status == "verified":
            entry.update(state=old_files[name].get("state", "adopted"), at=old_files[name].get("at", now))
            full = f.full or old_files[name].get("full")
        else:
            entry.update(state="adopted", at=now)
            full = f.full
        if full:
            entry["full"] = full
        files[name] = entry
    return {
        "format": MANIFEST_FORMAT,
        "kind": "local-view",
        "repo": spec.repo,
        "revision": spec.revision,
        "commit": a.commit,
        "snapshot": a.snapshot,
        "shared_cache": shared_cache,
        "dst": spec.dst,
        # the rule's text (an old path included) is part of every manifest: changing it rewrites them all
        "sampling": {
            "block": block,
            "count": count,
            "hash": "xxh3_64",
            "rule": "first, last and evenly spaced blocks (whole file if size <= block*count); "
            "see labkit/node/stage_node.py sample_offsets",
        },
        "files": files,
        "links": dict(sorted(a.links.items())),
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
