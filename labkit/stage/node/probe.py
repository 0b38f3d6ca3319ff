"""Node ops `probe` (a read-only look at the shared cache - commit, sizes, blob names, sampled blocks - and at
the view) and `hash` (whole-file hashes of files the controller names, for deep verification)."""

from __future__ import annotations

import binascii
import hashlib
import json
import os
import stat

from labkit.stage.node.base import (
    MANIFEST_NAME,
    PARTIAL_PREFIX,
    Fail,
    absolute,
    bare_name,
    blob_of,
    entry_state,
    file_hash,
    full_digest,
    nearest_existing,
    read_samples,
    split_blocks,
)


def resolve_commit(repo_cache: str, revision: str) -> tuple:
    """(commit, snapshot dir) for a branch/tag name via refs/<revision>, or a commit hash directly."""
    snapshots = os.path.join(repo_cache, "snapshots")
    if not os.path.isdir(repo_cache):
        raise Fail(f"model not in the shared cache: {repo_cache} does not exist")
    ref = os.path.join(repo_cache, "refs", revision)
    if os.path.isfile(ref):
        with open(ref, encoding="utf-8") as f:
            commit = f.read().strip()
        if not commit or "/" in commit or commit in (".", ".."):
            raise Fail(f"{ref} does not hold a commit hash")
    elif "/" not in revision and os.path.isdir(os.path.join(snapshots, revision)):
        commit = revision
    else:
        raise Fail(
            f"revision {revision!r} not found: {ref} does not exist "
            f"(and there is no {os.path.join(snapshots, revision)})"
        )
    snapshot = os.path.join(snapshots, commit)
    if not os.path.isdir(snapshot):
        raise Fail(f"{ref} names commit {commit}, but {snapshot} does not exist")
    return commit, snapshot


def snapshot_entry(path: str, blobs: str) -> dict:
    """One snapshot entry: a file (size, blob name), a folder (its files by path below the snapshot,
    `tree`), or broken (a dangling link)."""
    try:
        st = os.stat(path)
    except OSError as e:
        return {"kind": "broken", "error": f"{path}: {e.strerror}"}
    if not stat.S_ISDIR(st.st_mode):
        return {"kind": "file", "size": st.st_size, "blob": blob_of(path, blobs)}
    return {"kind": "dir", "tree": {}}


def snapshot_tree(top: str, prefix: str, blobs: str, out: dict) -> dict:
    """Every file below the snapshot folder `top`, keyed by its path below the snapshot ("original/x.json")."""
    for name in sorted(os.listdir(top)):
        path, rel = os.path.join(top, name), f"{prefix}/{name}"
        if os.path.isdir(path) and not os.path.islink(path):
            snapshot_tree(path, rel, blobs, out)
        else:
            out[rel] = snapshot_entry(path, blobs)
    return out


def compare(path: str, src: str, size: int, block: int, count: int, src_blocks=None) -> list:
    """Per sampled block: is it the same in `path` as in `src` (both `size` bytes)?"""
    mine = split_blocks(read_samples(path, size, block, count), size, block, count)
    if src_blocks is None:
        src_blocks = split_blocks(read_samples(src, size, block, count), size, block, count)
    return [a == b for a, b in zip(mine, src_blocks)]  # noqa: B905 (python3 < 3.10 on nodes)


def view_tree(
    top: str, prefix: str, snap_tree: dict, snapshot: str, block: int, count: int, out: dict
) -> dict:
    """Every non-folder entry below a folder of the view (a copy made by hand), compared with the snapshot's
    file of the same path where both are files of one size."""
    for name in sorted(os.listdir(top)):
        path, rel = os.path.join(top, name), f"{prefix}/{name}"
        state = entry_state(path)
        if state["state"] == "dir":
            view_tree(path, rel, snap_tree, snapshot, block, count, out)
            continue
        want = snap_tree.get(rel, {})
        if state["state"] == "file" and want.get("kind") == "file" and want["size"] == state["size"]:
            state["match"] = compare(path, os.path.join(snapshot, rel), state["size"], block, count)
        out[rel] = state
    return out


def read_sources(snapshot: str, entries: dict, req: dict, block: int, count: int, full: bool) -> tuple:
    """({name: size, digest, blob [, samples, full]}, {name: sampled blocks}) of the local files in the cache.

    Raw bytes go back from one node only (the controller hashes them); every node returns a digest of what it
    read, so a node seeing a different source than the others is caught."""
    sources, blocks = {}, {}
    for name in [bare_name(n) for n in req["local"]]:
        e = entries.get(name)
        if e is None or e["kind"] != "file":
            continue  # the controller reports it (names the node, file and snapshot)
        path = os.path.join(snapshot, name)
        raw = read_samples(path, e["size"], block, count)
        blocks[name] = split_blocks(raw, e["size"], block, count)
        src = {
            "size": e["size"],
            "digest": hashlib.blake2b(raw, digest_size=16).hexdigest(),
            "blob": e["blob"],
        }
        if name in req.get("send_source", ()):
            src["samples"] = binascii.b2a_base64(raw, newline=False).decode()
        if full:
            src["full"] = full_digest(path)
        sources[name] = src
    return sources, blocks


def legacy_blobs(manifest: object, repo_cache: str, blobs: str) -> dict:
    """For a manifest of an older labkit (file entries without "blob"): the blob each entry's recorded source
    resolves to, when that snapshot is still in the cache ({name: blob or None})."""
    files = manifest.get("files") if isinstance(manifest, dict) else None
    out = {}
    for name, entry in (files if isinstance(files, dict) else {}).items():
        source = entry.get("source") if isinstance(entry, dict) else None
        if not isinstance(source, str) or "blob" in entry:
            continue
        inside = source.startswith(os.path.join(repo_cache, "snapshots") + "/") and ".." not in source.split(
            "/"
        )
        out[name] = blob_of(source, blobs) if inside else None
    return out


def probe(req: dict) -> dict:
    repo_cache = absolute(req["repo_cache"], "shared cache path")
    dst = absolute(req["dst"], "view path")
    local = [bare_name(n) for n in req["local"]]
    block, count, full = int(req["block"]), int(req["count"]), bool(req.get("full"))
    commit, snapshot = resolve_commit(repo_cache, req["revision"])
    blobs = os.path.realpath(os.path.join(repo_cache, "blobs"))

    entries = {}
    for name in sorted(os.listdir(snapshot)):
        entries[name] = snapshot_entry(os.path.join(snapshot, name), blobs)
        if entries[name]["kind"] == "dir":
            snapshot_tree(os.path.join(snapshot, name), name, blobs, entries[name]["tree"])
    sources, source_blocks = read_sources(snapshot, entries, req, block, count, full)

    existing = nearest_existing(dst)
    vfs = os.statvfs(existing)
    out = {
        "node": os.uname().nodename,
        "commit": commit,
        "snapshot": snapshot,
        "entries": entries,
        "sources": sources,
        "free": vfs.f_bavail * vfs.f_frsize,
        "fs_path": existing,
        "fs_dev": os.stat(existing).st_dev,
        "dst_state": "dir" if os.path.isdir(dst) else entry_state(dst)["state"],  # a link to a dir is fine
        "view": {},
        "partials": [],
        "extra": {},
        "manifest": None,
        "legacy_blobs": {},
    }
    if out["dst_state"] == "dir":
        list_view(dst, out, local, source_blocks, block, count, full)
        out["legacy_blobs"] = legacy_blobs(out["manifest"], repo_cache, blobs)
    return out


def list_view(
    dst: str, out: dict, local: list, source_blocks: dict, block: int, count: int, full: bool
) -> None:
    """Each entry of the view, into `out`: partial copies, the manifest, entries of the snapshot (files of the
    source's size compared by sampled blocks, folders file by file) and the rest."""
    entries, snapshot = out["entries"], out["snapshot"]
    for name in sorted(os.listdir(dst)):
        path = os.path.join(dst, name)
        state = entry_state(path)
        want = entries.get(name, {})
        if name.startswith(PARTIAL_PREFIX):
            out["partials"].append({"name": name, "alloc": state.get("alloc", 0)})
        elif name == MANIFEST_NAME:
            try:
                with open(path, encoding="utf-8") as f:
                    out["manifest"] = json.load(f)
            except (OSError, ValueError) as e:
                out["manifest"] = {"unreadable": str(e)}
        elif name not in entries:
            out["extra"][name] = state
        elif state["state"] == "file" and want["kind"] == "file" and want["size"] == state["size"]:
            src = os.path.join(snapshot, name)
            state["match"] = compare(path, src, state["size"], block, count, source_blocks.get(name))
            if full and name in local:
                state["full"] = full_digest(path)
            out["view"][name] = state
        elif state["state"] == "dir" and want["kind"] == "dir" and name not in local:
            state["tree"] = view_tree(path, name, want["tree"], snapshot, block, count, {})
            out["view"][name] = state
        else:
            out["view"][name] = state


def view_rel(rel: str) -> str:
    """A path below the view: bare names joined by '/' (never absolute, never '..')."""
    if not isinstance(rel, str):
        raise Fail(f"refusing path {rel!r} below the view")
    return "/".join(bare_name(part) for part in rel.split("/"))


def hash_files(req: dict) -> dict:
    """Whole-file hashes (base.file_hash) of the view's files `files` [{rel, algo}] and of the cache's files
    `sources` [{path, algo}] (those without a blob name to compare with)."""
    dst = absolute(req["dst"], "view path")
    out: dict = {"files": {}, "sources": {}}
    for item in req.get("files", ()):
        rel = view_rel(item["rel"])
        out["files"][rel] = file_hash(os.path.join(dst, rel), item["algo"])
    for item in req.get("sources", ()):
        path = absolute(item["path"], "source path")
        out["sources"][path] = file_hash(os.path.realpath(path), item["algo"])
    return out
