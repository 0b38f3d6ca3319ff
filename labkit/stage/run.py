"""Staging a local view: hot shards copied to node-local disk, every other file symlinked into the shared cache.

Why: the lab note measured the Engram shards (model-00047/48) served off the NAS at 750 t/s prefill and
+258 MB NFS reads per short completion, vs 3,957 t/s and 0 MB with them on local disk. A `local-view`
staging entry declares which files to copy; `stage` makes every launch node hold one complete checkpoint
directory at `dst`:

    <dst>/model-00047-of-00048.safetensors   real copy (verified)
    <dst>/config.json -> <shared_cache>/models--org--name/snapshots/<commit>/config.json   (absolute link)
    <dst>/.labkit-view.json                  manifest: sizes, sampled-block hashes, source, commit, times

Links are absolute so they resolve inside the container, where the shared cache is mounted at the same
path (LanePlan.mounts()). Flow per run, every node in parallel:
  1. probe (read-only): resolve the revision, list the snapshot, free bytes of dst's filesystem, state
     and sampled blocks of the local files in the view and in the cache;
  2. preflight: need = bytes of local files not present and valid + min_free vs free (+ reclaimable
     partial/invalid files); views on one filesystem add their copies and count the largest min_free once;
     nodes resolving different commits, or any node short -> refused before anything changed anywhere;
  3. build (only where something is missing or wrong): remove stale/invalid entries, link, copy to a
     temp name, fsync, check, rename;
  4. verify: probe again, every file must check out; write the manifest atomically if it changed.
A second run is step 1 only (plus a comparison): verification, seconds.
Ctrl-C at any step ends the node-script processes on every node (NodeJobs: closing an SSH channel would
leave them running), waits for them (at most 30 s) and is then raised; a copy cut short is removed, or
removed by the next run, never left under its final name.

Serving: call `stage(plan, group)` and then `check_view(plan, group)` (no broken link, no partial copy)
before boot; the engine gets `plan.model_path` (the view's container mount) and `plan.mounts()` binds the
view and the shared cache at its own path. (labkit.measure's `NodeNfsProbe` samples each node's NFS
server-read bytes around a run.)

The parts: `assess` (pure decisions from one probe, the space check), `transport` (the node-side call,
timeouts, NodeJobs), `reports` (what is shown and returned); this module runs the steps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from labkit.errors import LabkitError, NodeError
from labkit.stage import node_script as node_side
from labkit.stage.assess import (
    MANIFEST_NAME,
    NodeAssessment,
    Source,
    assess,
    check_entry,
    check_space,
    repo_cache_path,
    sources_from,
)
from labkit.stage.reports import CopyProgress, NodeReport, StageReport, ViewReport
from labkit.stage.transport import DEFAULT_TIMEOUTS, HostLike, NodeJobs, Timeouts, call_node, each_node

MANIFEST_FORMAT = 1


def local_views(plan) -> list:
    """The plan's local-view staging entries, after every staging entry passed `check_entry` (RecipeError)."""
    specs = [spec for spec in plan.staging if spec.kind == "local-view"]
    for i, spec in enumerate(plan.staging):
        check_entry(plan, i, spec)
    return specs


def probe_node(
    h: HostLike,
    plan,
    spec,
    block: int,
    count: int,
    full: bool,
    send_source: Iterable[str] | None = None,
    timeout: float | None = None,
    jobs: NodeJobs | None = None,
) -> dict:
    """The node's read-only view of the cache and `spec.dst`, labelled with the host's name.

    `send_source`: local files whose raw sampled source blocks this node returns (default: all)."""
    request = {
        "repo_cache": repo_cache_path(plan.cluster.shared_cache, spec.repo),
        "revision": spec.revision,
        "dst": spec.dst,
        "local": list(spec.local),
        "block": block,
        "count": count,
        "full": full,
        "send_source": list(spec.local if send_source is None else send_source),
    }
    out = call_node(h, "probe", request, timeout=timeout, jobs=jobs)
    out["hostname"], out["node"] = out.get("node"), h.name
    return out


def _full_bytes(probe: dict, spec) -> int:
    """Bytes a full-mode probe hashes whole: each local file in the cache and its copy in the view."""
    src = sum(e.get("size", 0) for n, e in probe["entries"].items() if n in spec.local)
    return src + sum(v.get("size", 0) for n, v in probe["view"].items() if n in spec.local)


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


def stage(
    plan,
    hosts: Iterable[HostLike],
    *,
    full: bool = False,
    progress: bool = True,
    block: int = node_side.SAMPLE_BLOCK,
    count: int = node_side.SAMPLE_COUNT,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    copy_rate: float | None = None,
) -> StageReport:
    """Build and verify every local-view staging entry of `plan` on every host; see the module doc.

    `copy_rate`: cap each node's copy at this many bytes/s (tests: a copy slow enough to interrupt).

    Raises StagingRefused (nothing changed) when a node lacks space, NodeError naming nodes whose probe,
    build or verification failed or timed out, RecipeError for a plan whose staging paths are unsafe.
    A Ctrl-C ends the node jobs on every node (a copy in flight is discarded, never left under its final
    name; the next stage redoes it) and is raised once they ended (NodeJobs, each_node).
    """
    t0 = time.monotonic()
    jobs = NodeJobs()
    hosts = list(hosts)
    specs = local_views(plan)
    if not specs or not hosts:
        return StageReport([], 0.0)

    # 1+2: probe everything, refuse before any change.
    assessed, sources = _probe_and_assess(plan, specs, hosts, block, count, full, timeouts, jobs)
    preflights = [_check_space_grouped(assessed, specs, i) for i in range(len(specs))]

    reports = []
    for i, spec in enumerate(specs):
        reports.append(
            _stage_view(
                plan,
                spec,
                hosts,
                assessed[i],
                preflights[i],
                sources[i],
                full,
                progress,
                block,
                count,
                timeouts,
                copy_rate,
                jobs,
            )
        )
    return StageReport(reports, time.monotonic() - t0)


def _probe_and_assess(
    plan, specs, hosts: list[HostLike], block: int, count: int, full: bool, timeouts: Timeouts, jobs: NodeJobs
) -> tuple[list[list[NodeAssessment]], list[dict[str, Source]]]:
    """Probe every node (in parallel, read-only) and assess each.

    The raw source blocks of local file j come from node j mod N only (spreading the transfer: fabric moves
    stdout slowly), every node compares its own copy with the source it reads itself. Full mode probes
    twice: sampled first (short timeout, gives the sizes), then with whole-file hashes, timed for their bytes."""
    names = [h.name for h in hosts]

    def probe_one(h: HostLike, spec) -> dict:
        k = names.index(h.name)
        send = [f for j, f in enumerate(spec.local) if j % len(names) == k]
        # in full mode the first probe is only for the sizes: its raw samples would travel twice
        probe = probe_node(
            h,
            plan,
            spec,
            block,
            count,
            False,
            send_source=() if full else send,
            timeout=timeouts.node,
            jobs=jobs,
        )
        if not full:
            return probe
        return probe_node(
            h,
            plan,
            spec,
            block,
            count,
            True,
            send_source=send,
            timeout=timeouts.for_bytes(_full_bytes(probe, spec), base=timeouts.node),
            jobs=jobs,
        )

    def probe_all(h: HostLike) -> list[dict]:
        return [probe_one(h, spec) for spec in specs]

    what = "staging preflight (nothing was changed)"
    probes = each_node(hosts, probe_all, what, jobs, "the staging preflight")
    for i, spec in enumerate(specs):
        commits = {n: probes[n][i]["commit"] for n in names}
        if len(set(commits.values())) > 1:
            raise NodeError(
                f"{what}: the nodes resolve {spec.repo}@{spec.revision} to different commits "
                "(is the shared cache the same on every node?)",
                {n: f"{spec.repo}@{spec.revision} is commit {c} here" for n, c in commits.items()},
            )
    try:
        sources = [
            sources_from([probes[n][i] for n in names], spec, block, count) for i, spec in enumerate(specs)
        ]
    except LabkitError as e:
        raise NodeError(what, {names[0]: str(e).removeprefix(names[0] + ": ")})
    assessed: list[list[NodeAssessment]] = []
    errors: dict[str, str] = {}
    for i, spec in enumerate(specs):
        row = []
        for h in hosts:
            try:
                row.append(assess(probes[h.name][i], spec, block, count, full, sources[i]))
            except LabkitError as e:
                errors.setdefault(h.name, str(e).removeprefix(h.name + ": "))
        assessed.append(row)
    if errors:
        raise NodeError(what, errors)
    return assessed, sources


def _check_space_grouped(assessed: list[list[NodeAssessment]], specs, index: int) -> list[dict]:
    """Space check for view `index`; views on the same filesystem of a node share its free bytes: their copies
    add up, and min_free (what must stay free on that filesystem) counts once, the largest of them."""
    combined = []
    for a in assessed[index]:
        same_fs = [b for row in assessed for b in row if b.node == a.node and b.fs_dev == a.fs_dev]
        combined.append(
            replace(
                a,
                copy_bytes=sum(b.copy_bytes for b in same_fs),
                min_free=max(b.min_free for b in same_fs),
                reclaim=sum(b.reclaim for b in same_fs),
            )
        )
    return check_space(combined, specs[index].dst)


def _stage_view(
    plan,
    spec,
    hosts: list[HostLike],
    assessed: list[NodeAssessment],
    preflight: list[dict],
    sources: dict[str, Source],
    full: bool,
    progress: bool,
    block: int,
    count: int,
    timeouts: Timeouts,
    copy_rate: float | None,
    jobs: NodeJobs,
) -> ViewReport:
    by_node = {a.node: a for a in assessed}
    node_of = {h.name: by_node[a.node] for h, a in zip(hosts, assessed, strict=True)}
    total = sum(c["size"] for a in assessed for c in a.to_copy)
    bar = CopyProgress(total, enabled=progress)
    shared_cache = plan.cluster.shared_cache
    now = datetime.now(UTC).isoformat(timespec="seconds")

    def one(h: HostLike) -> tuple[NodeReport, bool]:
        t0 = time.monotonic()
        a = node_of[h.name]
        rep = NodeReport(h.name, a.commit, repaired=list(a.problems), warnings=list(a.warnings))
        copied: dict[str, dict] = {}
        if a.changes:
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
            built = call_node(
                h, "build", request, on_event=bar.sink(h.name), timeout=timeouts.for_bytes(work), jobs=jobs
            )
            if built["errors"]:
                raise LabkitError("; ".join(built["errors"]))
            copied = {c["name"]: c for c in built["copied"]}
            rep.linked = built["linked"]
            rep.removed = sum(1 for name in built["removed"] if name not in copied)
            rep.bytes_copied = sum(c["bytes"] for c in built["copied"])
            rep.copy_seconds = sum(c["seconds"] for c in built["copied"])
            rep.methods = sorted({c["method"] for c in built["copied"]})
            # Verify what is now on disk, exactly as a later run would.
            again = assess(
                probe_node(
                    h, plan, spec, block, count, False, send_source=(), timeout=timeouts.node, jobs=jobs
                ),
                spec,
                block,
                count,
                False,
                sources,
            )
            if again.changes or again.commit != a.commit:
                raise LabkitError(
                    f"view {spec.dst} still incomplete after building: copy "
                    f"{[c['name'] for c in again.to_copy]}, link {[x['name'] for x in again.to_link]}, "
                    f"remove {again.to_remove}"
                )
            for name, f in again.files.items():
                f.full = a.files[name].full
            a = replace(again, manifest=a.manifest)
        rep.links_ok = len(a.links) - rep.linked
        for name, f in a.files.items():
            if name in copied:
                rep.copied += 1
            elif f.status == "verified":
                rep.verified += 1
            else:
                rep.adopted += 1
        manifest = build_manifest(spec, shared_cache, a, copied, block, count, now)
        written = False
        if not _same_manifest(a.manifest, manifest):
            text = json.dumps({**manifest, "updated": now}, indent=1) + "\n"
            call_node(
                h,
                "write",
                {"dst": spec.dst, "name": MANIFEST_NAME, "text": text},
                timeout=timeouts.node,
                jobs=jobs,
            )
            written = True
        rep.seconds = time.monotonic() - t0
        return rep, written

    try:
        activity = f"the copy into {spec.dst}" if total else f"the staging of {spec.dst}"
        done = each_node(hosts, one, f"staging {spec.dst}", jobs, activity, say=bar.write)
    finally:
        bar.close()
    # One commit on every node: the preflight refused otherwise, and each node's verification kept it.
    return ViewReport(
        spec.dst,
        spec.repo,
        spec.revision,
        assessed[0].commit,
        full,
        preflight,
        {n: r for n, (r, _) in done.items()},
        {n: w for n, (_, w) in done.items()},
    )


def preflight(
    plan, hosts: Iterable[HostLike], *, full: bool = False, timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> list[list[dict]]:
    """Only steps 1-2: per view, the per-node space rows; raises StagingRefused like `stage`. Read-only."""
    hosts = list(hosts)
    specs = local_views(plan)
    block, count = node_side.SAMPLE_BLOCK, node_side.SAMPLE_COUNT

    if not specs or not hosts:
        return []
    assessed, _ = _probe_and_assess(plan, specs, hosts, block, count, full, timeouts, NodeJobs())
    return [_check_space_grouped(assessed, specs, i) for i in range(len(specs))]


def check_view(plan, hosts: Iterable[HostLike], timeouts: Timeouts = DEFAULT_TIMEOUTS) -> dict[str, int]:
    """Before launch: every link in every view resolves and no partial copy is left; {node: links}.

    Raises NodeError naming each node with broken links (and their targets)."""
    specs = local_views(plan)
    jobs = NodeJobs()

    def one(h: HostLike) -> int:
        total = 0
        for spec in specs:
            r = call_node(h, "check", {"dst": spec.dst}, timeout=timeouts.node, jobs=jobs)
            problems = [f"{spec.dst}/{b['name']} -> {b['target']} is broken" for b in r["broken"]]
            problems += [f"{spec.dst}/{p} is an unfinished copy" for p in r["partials"]]
            if problems:
                raise LabkitError(
                    "; ".join(problems[:10])
                    + (f" (+{len(problems) - 10} more)" if len(problems) > 10 else "")
                )
            total += r["links"]
        return total

    return each_node(hosts, one, "view check before launch", jobs, "the view check")
