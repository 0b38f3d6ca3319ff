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

The parts: `assess` (pure decisions from one probe), `space` (the space check), `build` (step 3 on one
node and the manifest), `transport` (the node-side call, timeouts, NodeJobs), `reports` (what is shown
and returned); this module runs the steps.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime

from labkit.errors import LabkitError, NodeError
from labkit.nodes import each_node
from labkit.stage.assess import NodeAssessment, Source, assess, check_entry, repo_cache_path, sources_from
from labkit.stage.build import build_manifest, build_node, tally_files, write_manifest
from labkit.stage.node import base as node_side
from labkit.stage.reports import CopyProgress, NodeReport, StageReport, ViewReport
from labkit.stage.space import check_space_grouped
from labkit.stage.transport import DEFAULT_TIMEOUTS, HostLike, NodeJobs, Timeouts, call_node


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
    preflights = [check_space_grouped(assessed, specs, i) for i in range(len(specs))]

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
    probes = each_node(hosts, probe_all, what, jobs.stop, "the staging preflight")
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
    """Steps 3-4 for one view, every node in parallel: build where something changes, verify, manifest."""
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
            copied = build_node(
                h,
                spec,
                a,
                rep,
                block=block,
                count=count,
                full=full,
                copy_rate=copy_rate,
                on_event=bar.sink(h.name),
                timeouts=timeouts,
                jobs=jobs,
            )
            a = _verify_built(h, plan, spec, a, sources, block, count, timeouts, jobs)
        tally_files(rep, a, copied)
        manifest = build_manifest(spec, shared_cache, a, copied, block, count, now)
        written = write_manifest(h, spec.dst, manifest, a.manifest, now, timeouts.node, jobs)
        rep.seconds = time.monotonic() - t0
        return rep, written

    try:
        activity = f"the copy into {spec.dst}" if total else f"the staging of {spec.dst}"
        done = each_node(hosts, one, f"staging {spec.dst}", jobs.stop, activity, say=bar.write)
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


def _verify_built(
    h: HostLike,
    plan,
    spec,
    a: NodeAssessment,
    sources: dict[str, Source],
    block: int,
    count: int,
    timeouts: Timeouts,
    jobs: NodeJobs,
) -> NodeAssessment:
    """Probe the built view again and assess it exactly as a later run would: nothing may be left to do.

    The result keeps the whole-file hashes and the old manifest of `a` (the manifest still to be replaced)."""
    again = assess(
        probe_node(h, plan, spec, block, count, False, send_source=(), timeout=timeouts.node, jobs=jobs),
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
    return replace(again, manifest=a.manifest)


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
    return [check_space_grouped(assessed, specs, i) for i in range(len(specs))]


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

    return each_node(hosts, one, "view check before launch", jobs.stop, "the view check")
