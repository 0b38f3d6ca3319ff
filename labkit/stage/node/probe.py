"""Node op `probe`: a read-only look at the shared cache (commit, sizes, sampled blocks) and at the view."""

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
    entry_state,
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


def probe(req: dict) -> dict:
    repo_cache = absolute(req["repo_cache"], "shared cache path")
    dst = absolute(req["dst"], "view path")
    local = [bare_name(n) for n in req["local"]]
    block, count, full = int(req["block"]), int(req["count"]), bool(req.get("full"))
    commit, snapshot = resolve_commit(repo_cache, req["revision"])

    entries = {}
    for name in sorted(os.listdir(snapshot)):
        path = os.path.join(snapshot, name)
        try:
            st = os.stat(path)
        except OSError as e:
            entries[name] = {"kind": "broken", "error": f"{path}: {e.strerror}"}
            continue
        entries[name] = {"kind": "dir" if stat.S_ISDIR(st.st_mode) else "file", "size": st.st_size}

    sources, source_blocks = {}, {}
    for name in local:
        e = entries.get(name)
        if e is None or e["kind"] != "file":
            continue  # the controller reports it (names the node, file and snapshot)
        path = os.path.join(snapshot, name)
        raw = read_samples(path, e["size"], block, count)
        source_blocks[name] = split_blocks(raw, e["size"], block, count)
        # Raw bytes go back from one node only (the controller hashes them); every node returns a digest
        # of what it read, so a node seeing a different source than the others is caught.
        src = {"size": e["size"], "digest": hashlib.blake2b(raw, digest_size=16).hexdigest()}
        if name in req.get("send_source", ()):
            src["samples"] = binascii.b2a_base64(raw, newline=False).decode()
        if full:
            src["full"] = full_digest(path)
        sources[name] = src

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
    }
    if out["dst_state"] != "dir":
        return out
    for name in sorted(os.listdir(dst)):
        path = os.path.join(dst, name)
        state = entry_state(path)
        if name.startswith(PARTIAL_PREFIX):
            out["partials"].append({"name": name, "alloc": state.get("alloc", 0)})
        elif name == MANIFEST_NAME:
            try:
                with open(path, encoding="utf-8") as f:
                    out["manifest"] = json.load(f)
            except (OSError, ValueError) as e:
                out["manifest"] = {"unreadable": str(e)}
        elif name in entries:
            if name in sources and state["state"] == "file" and state["size"] == sources[name]["size"]:
                size = state["size"]
                mine = split_blocks(read_samples(path, size, block, count), size, block, count)
                state["match"] = [a == b for a, b in zip(mine, source_blocks[name])]  # noqa: B905
                if full:
                    state["full"] = full_digest(path)
            out["view"][name] = state
        else:
            out["extra"][name] = state
    return out
