"""Staging a local view: hot shards copied to node-local disk, every other file symlinked into the shared cache.

Why: the lab note measured the Engram shards (model-00047/48) served off the NAS at 750 t/s prefill and
+258 MB NFS reads per short completion, vs 3,957 t/s and 0 MB with them on local disk. A `local-view`
staging entry declares which files to copy; `stage` makes every launch node hold one complete checkpoint
directory at `dst`:

    <dst>/model-00047-of-00048.safetensors   real copy (verified)
    <dst>/config.json -> <shared_cache>/models--org--name/snapshots/<commit>/config.json   (absolute link)
    <dst>/.labkit-view.json                  manifest: sizes, blob names, sampled-block hashes, deep
                                             hashes, source, commit, times

Links are absolute so they resolve inside the container, where the shared cache is mounted at the same
path (LanePlan.mounts()). Flow per run, every node in parallel:
  1. probe (read-only): resolve the revision, list the snapshot with each file's blob name, free bytes of
     dst's filesystem, state and sampled blocks of the files in the view and in the cache; in deep mode
     the whole-file hashes not on record yet;
  2. preflight: need = bytes of local files not present and valid + min_free vs free (+ reclaimable
     partial/invalid files); views on one filesystem add their copies and count the largest min_free once;
     nodes resolving different commits, any node short, or a file labkit did not make in the way (unless
     named in `replace_foreign`) -> refused before anything changed anywhere (docs/staging.md);
  3. build (only where something is missing or wrong): remove stale/invalid entries, link, copy to a
     temp name, fsync, check, rename. With fan-out (the entry's `fanout`, on by default when the lane has
     more than one node, and more than one node needing copies): removals and links on every node first,
     then one `fan_out` delivering every copy, each shard read from the NAS once and passed node to node
     over the fabric, verified (SHA-256 against the blob name) before its rename (docs/fanout.md,
     "Running it");
  4. verify: probe again and assess with the new manifest, every file must check out; write the manifest
     atomically if it changed.
A second run is step 1 only (plus a comparison): verification, seconds.
Ctrl-C at any step ends the node-script processes on every node (NodeJobs: closing an SSH channel would
leave them running), waits for them (at most 30 s) and is then raised; a copy cut short is removed, or
removed by the next run, never left under its final name.

Serving: call `stage(plan, group)` and then `check_view(plan, group)` (no broken link, no partial copy)
before boot; the engine gets `plan.model_path` (the view's container mount) and `plan.mounts()` binds the
view and the shared cache at its own path. (labkit.measure's `NodeNfsProbe` samples each node's NFS
server-read bytes around a run.)

The parts: `assess`, `handmade` and `deep` (pure decisions from one probe: local files, the other names,
whole-file hashes), `space` (the space check), `probing` (steps 1-2 on every node), `build` (step 3 on one
node and the manifest), `transport` (the node-side call, timeouts, NodeJobs), `reports` (what is shown
and returned); this module runs the steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from labkit.errors import LabkitError
from labkit.nodes import each_node
from labkit.recipe import Invalid, LanePlan, StagingSpec, file_name
from labkit.stage.assess import NodeAssessment, assess, check_entry
from labkit.stage.build import (
    build_manifest,
    build_node,
    node_warnings,
    received_copies,
    tally_files,
    write_manifest,
)
from labkit.stage.fanout import needs_from, plan_fanout
from labkit.stage.fanout_run import Fetched, fabric_binds, fan_out
from labkit.stage.node import script as node_side
from labkit.stage.probing import Checks, probe_and_assess, probe_node
from labkit.stage.reports import CopyProgress, NodeReport, StageReport, ViewReport
from labkit.stage.sources import Source
from labkit.stage.space import check_space_grouped
from labkit.stage.transport import DEFAULT_TIMEOUTS, HostLike, NodeJobs, Timeouts, call_node

T = TypeVar("T")


def local_views(plan: LanePlan) -> list[StagingSpec]:
    """The plan's local-view staging entries, after every staging entry passed `check_entry` (RecipeError)."""
    specs = [spec for spec in plan.staging if spec.kind == "local-view"]
    for i, spec in enumerate(plan.staging):
        check_entry(plan, i, spec)
    return specs


def stage(
    plan: LanePlan,
    hosts: Iterable[HostLike],
    *,
    full: bool = False,
    deep: bool = False,
    replace_foreign: Iterable[str] = (),
    progress: bool = True,
    block: int = node_side.SAMPLE_BLOCK,
    count: int = node_side.SAMPLE_COUNT,
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
    copy_rate: float | None = None,
) -> StageReport:
    """Build and verify every local-view staging entry of `plan` on every host; see the module doc.

    `deep`: every view verified deep (else each entry's `verify`, "sampled" by default).
    `replace_foreign`: names of files labkit did not make that it may replace (else such a file in the
    way is refused, naming it). `copy_rate`: cap each node's copy at this many bytes/s (tests: a copy slow
    enough to interrupt).

    Raises StagingRefused (nothing changed) when a node lacks space, NodeError naming nodes whose probe,
    build or verification failed or timed out, or whose view holds files it may not replace, RecipeError for
    a plan whose staging paths are unsafe.
    A Ctrl-C ends the node jobs on every node (a copy in flight is discarded, never left under its final
    name; the next stage redoes it) and is raised once they ended (NodeJobs, each_node).
    """
    t0 = time.monotonic()
    jobs = NodeJobs()
    hosts = list(hosts)
    specs = local_views(plan)
    checks = _checks(specs, block, count, full, deep, replace_foreign)
    if not specs or not hosts:
        return StageReport([], 0.0)

    # 1+2: probe everything, refuse before any change.
    assessed, sources = probe_and_assess(plan, specs, hosts, checks, timeouts, jobs)
    preflights = [check_space_grouped(assessed, specs, i) for i in range(len(specs))]

    reports = []
    for i, spec in enumerate(specs):
        run = _ViewRun(plan, spec, i, hosts, sources[i], checks, progress, timeouts, copy_rate, jobs)
        reports.append(run.stage(assessed[i], preflights[i]))
    return StageReport(reports, time.monotonic() - t0)


def _checks(
    specs: Sequence[StagingSpec],
    block: int,
    count: int,
    full: bool,
    deep: bool,
    replace_foreign: Iterable[str],
) -> Checks:
    """The checks of one call; names to replace are checked here, before any node is touched."""
    names = [replace_foreign] if isinstance(replace_foreign, str) else list(replace_foreign)
    for name in names:
        try:
            file_name(name, "--replace-foreign")
        except Invalid as e:
            raise LabkitError(f"--replace-foreign {name!r}: {e.message} (a name in the view, no '/')")
    modes = tuple(deep or spec.verify == "deep" for spec in specs)
    return Checks(block, count, full, modes, frozenset(names))


@dataclass
class _ViewRun:
    """Steps 3-4 for one view (`index` in the plan's local views), every node in parallel: build where
    something changes, verify, manifest."""

    plan: LanePlan
    spec: StagingSpec
    index: int
    hosts: list[HostLike]
    sources: dict[str, Source]
    checks: Checks
    progress: bool
    timeouts: Timeouts
    copy_rate: float | None
    jobs: NodeJobs

    @property
    def deep(self) -> bool:
        return self.checks.deep[self.index]

    def stage(self, assessed: list[NodeAssessment], preflight: list[dict]) -> ViewReport:
        spec = self.spec
        node_of = {h.name: a for h, a in zip(self.hosts, assessed, strict=True)}
        total = sum(c["size"] for a in assessed for c in a.to_copy)
        bar = CopyProgress(total, enabled=self.progress)
        now = datetime.now(UTC).isoformat(timespec="seconds")
        fanout = None
        try:
            if self.fanning(assessed):
                done, fanout = self.fanned(node_of, bar, now)
            else:
                activity = f"the copy into {spec.dst}" if total else f"the staging of {spec.dst}"
                done = self.each(lambda h: self.one(h, node_of[h.name], bar, now), bar, activity)
        finally:
            bar.close()
        # One commit on every node: the preflight refused otherwise, and each node's verification kept it.
        return ViewReport(
            spec.dst,
            spec.repo,
            spec.revision,
            assessed[0].commit,
            self.checks.full,
            preflight,
            {n: r for n, (r, _) in done.items()},
            {n: w for n, (_, w) in done.items()},
            "deep" if self.deep else "sampled",
            fanout,
        )

    def each(self, fn: Callable[[HostLike], T], bar: CopyProgress, activity: str) -> dict[str, T]:
        return each_node(self.hosts, fn, f"staging {self.spec.dst}", self.jobs.stop, activity, say=bar.write)

    def fanning(self, assessed: list[NodeAssessment]) -> bool:
        """Whether this view's copies go by fan-out (docs/fanout.md, "Running it"): the entry's `fanout`
        (absent: on when the lane has more than one node), and more than one node needs copies. Not with
        --full (every node reads its source whole for the hash anyway) nor with `copy_rate` (the build's
        test-only cap of the independent copies)."""
        on = self.spec.fanout if self.spec.fanout is not None else len(self.hosts) > 1
        needing = sum(1 for a in assessed if a.to_copy)
        return bool(on) and needing > 1 and not self.checks.full and not self.copy_rate

    def fanned(self, node_of: dict[str, NodeAssessment], bar: CopyProgress, now: str) -> tuple[dict, dict]:
        """Removals and links on every node, then one fan-out of every node's copies (each shard read from the
        NAS once), then each node's verification, tally and manifest as after independent copies."""
        t0, spec = time.monotonic(), self.spec
        reps = self.each(lambda h: self.prepare(h, node_of[h.name], bar), bar, f"the staging of {spec.dst}")
        plan = plan_fanout(*needs_from([node_of[h.name] for h in self.hosts]))
        binds = fabric_binds(self.plan, self.hosts, timeout=self.timeouts.node)
        report = fan_out(
            self.hosts,
            plan,
            spec.dst,
            binds=binds,
            on_event=bar.peer_sink,
            timeouts=self.timeouts,
            jobs=self.jobs,
        )
        got: dict[str, dict[str, Fetched]] = {}
        for f in report.files:
            got.setdefault(f.node, {})[f.name] = f
        for n, notes in node_warnings(report.warnings, list(reps)).items():
            reps[n].warnings += notes
        done = self.each(
            lambda h: self.finish(h, node_of[h.name], reps[h.name], now, t0, got.get(h.name, {})),
            bar,
            f"the verification of {spec.dst}",
        )
        return done, report.record()

    def prepare(self, h: HostLike, a: NodeAssessment, bar: CopyProgress) -> NodeReport:
        rep = NodeReport(h.name, a.commit, repaired=list(a.problems), warnings=list(a.warnings))
        if a.to_link or a.to_remove:
            self.build(h, a, rep, bar, copy=False)
        return rep

    def build(self, h: HostLike, a: NodeAssessment, rep: NodeReport, bar: CopyProgress, copy: bool) -> dict:
        c = self.checks
        return build_node(
            h,
            self.spec,
            a,
            rep,
            block=c.block,
            count=c.count,
            full=c.full,
            copy_rate=self.copy_rate,
            on_event=bar.sink(h.name),
            timeouts=self.timeouts,
            jobs=self.jobs,
            copy=copy,
        )

    def one(self, h: HostLike, a: NodeAssessment, bar: CopyProgress, now: str) -> tuple[NodeReport, bool]:
        t0 = time.monotonic()
        rep = NodeReport(h.name, a.commit, repaired=list(a.problems), warnings=list(a.warnings))
        copied = self.build(h, a, rep, bar, copy=True) if a.changes else {}
        return self.finish(h, a, rep, now, t0, copied=copied)

    def finish(
        self,
        h: HostLike,
        a: NodeAssessment,
        rep: NodeReport,
        now: str,
        t0: float,
        fetched: Mapping[str, Fetched] | None = None,
        copied: dict[str, dict] | None = None,
    ) -> tuple[NodeReport, bool]:
        """Step 4 on one node after its build (`copied`) or fan-out (`fetched`): verify, tally, manifest."""
        c, spec = self.checks, self.spec
        probe = self.reprobe(h) if a.changes else None
        if fetched:
            assert (
                probe is not None
            )  # the fetched files were to be copied: the node had changes, was reprobed
            copied = received_copies(rep, a, fetched, probe["view"], self.deep)
        copied = copied or {}
        manifest = build_manifest(spec, self.plan.cluster.shared_cache, a, copied, c.block, c.count, now)
        if probe is not None:
            self.verify_built(probe, a, manifest)
        tally_files(rep, a, copied, c.block, c.count, c.full)
        for name, f in (fetched or {}).items():
            rep.verification[name] += f" (on receipt from {f.source}: {f.verified})"
        written = write_manifest(h, spec.dst, manifest, a.manifest, now, self.timeouts.node, self.jobs)
        rep.seconds = time.monotonic() - t0
        return rep, written

    def reprobe(self, h: HostLike) -> dict:
        c = self.checks
        return probe_node(h, self.plan, self.spec, c.block, c.count, False, (), self.timeouts.node, self.jobs)

    def verify_built(self, probe: dict, a: NodeAssessment, manifest: dict) -> None:
        """Assess the built view's probe again with the manifest about to be written, exactly as a later
        sampled run would: nothing may be left to do."""
        c, spec = self.checks, self.spec
        probe["manifest"] = manifest
        again = assess(probe, spec, c.block, c.count, False, self.sources, replace_foreign=c.replace_foreign)
        if again.changes or again.commit != a.commit:
            raise LabkitError(
                f"view {spec.dst} still incomplete after building: copy "
                f"{[x['name'] for x in again.to_copy]}, link {[x['name'] for x in again.to_link]}, "
                f"remove {again.to_remove}"
            )


def preflight(
    plan: LanePlan,
    hosts: Iterable[HostLike],
    *,
    full: bool = False,
    deep: bool = False,
    replace_foreign: Iterable[str] = (),
    timeouts: Timeouts = DEFAULT_TIMEOUTS,
) -> list[list[dict]]:
    """Only steps 1-2: per view, the per-node space rows; raises like `stage` before any change. Read-only
    (deep: the local copies are hashed, so a mismatch counts in the space they need)."""
    hosts = list(hosts)
    specs = local_views(plan)
    checks = _checks(specs, node_side.SAMPLE_BLOCK, node_side.SAMPLE_COUNT, full, deep, replace_foreign)
    if not specs or not hosts:
        return []
    assessed, _ = probe_and_assess(plan, specs, hosts, checks, timeouts, NodeJobs())
    return [check_space_grouped(assessed, specs, i) for i in range(len(specs))]


def check_view(
    plan: LanePlan, hosts: Iterable[HostLike], timeouts: Timeouts = DEFAULT_TIMEOUTS
) -> dict[str, int]:
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
