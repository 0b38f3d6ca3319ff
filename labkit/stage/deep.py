"""Deep verification and the names of every check (docs/staging.md, "Deep verification").

The hub cache names each blob by its content (an LFS file's SHA-256, a git file's git SHA-1) and the
snapshot links resolve to it, so the whole-file hash of a copy on a node's disk can be compared with that
name offline, without reading the NAS again. A hash is computed once: the manifest records it with the
file's size, mtime and ctime, and while all three stay, later stages take it as it is (ctime too, because
`touch -d` or `rsync -t` can put an mtime back after a change; ctime cannot be set). Pure, except
`hash_view` (one `hash` op per node, before anything changes).
"""

from __future__ import annotations

from typing import Any, TypeGuard

from labkit.recipe import StagingSpec
from labkit.stage.node import script as node_side
from labkit.stage.transport import HostLike, NodeJobs, Timeouts, call_node
from labkit.stage.viewstate import FileState, Scope

CACHED = "cached, size+mtime+ctime unchanged"
NO_BLOB = "source hashed: no blob name"


def expected(blob: Any) -> dict | None:
    """{"algo", "hex"} a copy of this blob must hash to, or None when the name says nothing (not a hub blob)."""
    algo = node_side.hash_algo(blob)
    return {"algo": algo, "hex": blob} if algo else None


def copy_expect(blob: Any) -> dict:
    """What a new copy is checked against before its rename: the blob name, else the source hashed too."""
    return expected(blob) or {"algo": "sha256", "hex": None}


def as_record(found: dict, at: str) -> dict:
    """The manifest form of a node's hash result: {<algo>: hex, size, mtime_ns, ctime_ns, at}."""
    return {
        found["algo"]: found["hex"],
        "size": found["size"],
        "mtime_ns": found["mtime_ns"],
        "ctime_ns": found["ctime_ns"],
        "at": at,
    }


def algo_of(record: dict) -> str | None:
    return next((a for a in ("sha256", "git-sha1") if isinstance(record.get(a), str)), None)


def holds(record: Any, have: dict) -> TypeGuard[dict]:
    """The file is still the one that was hashed: same size, mtime and ctime."""
    return (
        isinstance(record, dict)
        and algo_of(record) is not None
        and all(record.get(k) == have.get(k) for k in ("size", "mtime_ns", "ctime_ns"))
    )


def kept_record(entry: Any, have: dict, blob: Any) -> dict | None:
    """The manifest's deep record of a file, if it still holds and says the file is this blob (else None)."""
    record = entry.get("deep") if isinstance(entry, dict) else None
    want = expected(blob)
    if want is None or not holds(record, have) or record.get(want["algo"]) != want["hex"]:
        return None
    return record


def candidates(probe: dict, spec: StagingSpec) -> dict[str, tuple[dict, Any, str, bool]]:
    """Files on the node's disk worth a whole-file hash: {rel: (state, blob, source path, local)} for every
    file of the view that passed size and sampled blocks (a file that did not is copied again anyway)."""
    out = {}
    snapshot = probe["snapshot"]
    for name, have in probe["view"].items():
        entry = probe["entries"].get(name, {})
        if have["state"] == "file" and entry.get("kind") == "file" and all(have.get("match", [False])):
            out[name] = (have, entry.get("blob"), f"{snapshot}/{name}", name in spec.local)
        elif have["state"] == "dir" and entry.get("kind") == "dir":
            for rel, got in have.get("tree", {}).items():
                want = entry["tree"].get(rel, {})
                if got["state"] == "file" and want.get("kind") == "file" and all(got.get("match", [False])):
                    out[rel] = (got, want.get("blob"), f"{snapshot}/{rel}", False)
    return out


def hash_view(
    h: HostLike, probe: dict, spec: StagingSpec, timeouts: Timeouts, jobs: NodeJobs, at: str
) -> None:
    """Hash what `candidates` lists on the node, unless the manifest's record still holds; the results go
    into probe["deep"] ({rel: {"record", "cached", "source"}}). Read-only on the node."""
    manifest = probe["manifest"] if isinstance(probe["manifest"], dict) else {}
    tables: dict[str, dict] = {
        key: t if isinstance(t := manifest.get(key), dict) else {} for key in ("files", "kept")
    }
    files, sources, out = [], [], {}
    for rel, (have, blob, source, local) in candidates(probe, spec).items():
        record = kept_record(tables["files" if local else "kept"].get(rel), have, blob)
        if record is not None:
            out[rel] = {"record": record, "cached": True, "source": None}
            continue
        algo = (expected(blob) or {"algo": "sha256"})["algo"]
        files.append({"rel": rel, "algo": algo, "size": have["size"]})
        if expected(blob) is None:
            sources.append({"path": source, "algo": algo, "size": have["size"], "rel": rel})
    if files:
        work = sum(f["size"] for f in files) + sum(s["size"] for s in sources)
        request = {
            "dst": spec.dst,
            "files": [{"rel": f["rel"], "algo": f["algo"]} for f in files],
            "sources": [{"path": s["path"], "algo": s["algo"]} for s in sources],
        }
        got = call_node(h, "hash", request, timeout=timeouts.for_bytes(work, base=timeouts.node), jobs=jobs)
        src_hex = {s["rel"]: got["sources"][s["path"]]["hex"] for s in sources}
        for f in files:
            record = as_record(got["files"][f["rel"]], at)
            out[f["rel"]] = {"record": record, "cached": False, "source": src_hex.get(f["rel"])}
    probe["deep"] = out


def deep_problem(scope: Scope, f: FileState) -> str | None:
    """None when the copy's whole-file hash is the blob's name (or the source's hash); else the mismatch,
    with both hashes. Sets f.deep and f.check from what was found."""
    info = scope.probe.get("deep", {}).get(f.name)
    if info is None:
        return "could not be hashed (not a regular file of the source's size?)"
    record = info["record"]
    algo = algo_of(record) or "sha256"
    want = expected(f.blob)
    want_hex, said = (want["hex"], "its blob name says") if want else (info["source"], "the source hashes to")
    got = record.get(algo)
    if got != want_hex:
        return (
            f"has {algo} {got}, but {said} {want_hex} (same size, sampled blocks match: other bytes"
            f"{', hash on record' if info['cached'] else ''})"
        )
    f.deep = record
    f.check = deep_text(algo, info["cached"], want is None)
    return None


def deep_text(algo: str, cached: bool = False, source_hashed: bool = False) -> str:
    notes = [n for n, on in ((CACHED, cached), (NO_BLOB, source_hashed)) if on]
    return f"deep {algo}" + "".join(f" ({n})" for n in notes)


def sampled_text(size: int, block: int, count: int, hashed: bool = True, full: bool = False) -> str:
    """The sampled check's name: xxh3 of `count` blocks for the local files (hashed on the controller), a
    byte comparison with the source for hand-made copies; a small file is covered whole."""
    if size <= block * count:
        text = "whole file, xxh3" if hashed else "whole file, compared with the snapshot"
    else:
        text = (
            f"sampled xxh3 {count} blocks"
            if hashed
            else f"sampled {count} blocks, compared with the snapshot"
        )
    return text + (" + full blake2b-512" if full else "")


def copy_text(f: FileState, deep: bool, block: int, count: int, full: bool) -> str:
    """The check a copy made in this stage had before its rename."""
    if deep:
        return deep_text(copy_expect(f.blob)["algo"], source_hashed=expected(f.blob) is None)
    return sampled_text(f.size, block, count, full=full)
