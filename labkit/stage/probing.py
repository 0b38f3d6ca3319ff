"""Steps 1-2 before anything changes: probe every node (read-only, in parallel), hash what deep verification
needs there (read-only), and assess each node's views; any refusal names its nodes and nothing was changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from labkit.errors import LabkitError, NodeError
from labkit.nodes import each_node
from labkit.recipe import LanePlan, StagingSpec
from labkit.stage.assess import NodeAssessment, assess, repo_cache_path
from labkit.stage.deep import hash_view
from labkit.stage.sources import Source, sources_from
from labkit.stage.transport import HostLike, NodeJobs, Timeouts, call_node

WHAT = "staging preflight (nothing was changed)"


def probe_node(
    h: HostLike,
    plan: LanePlan,
    spec: StagingSpec,
    block: int,
    count: int,
    full: bool,
    send_source: Iterable[str] | None = None,
    timeout: float | None = None,
    jobs: NodeJobs | None = None,
) -> dict:
    """The node's read-only view of the cache and `spec.dst`, labelled with the host's name.

    `send_source`: local files whose raw sampled source blocks this node returns (default: all)."""
    cache = plan.cluster.shared_cache
    assert cache is not None  # a recipe with staging entries has one (recipe rules; check_entry)
    request = {
        "repo_cache": repo_cache_path(cache, spec.repo),
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


def _full_bytes(probe: dict, spec: StagingSpec) -> int:
    """Bytes a full-mode probe hashes whole: each local file in the cache and its copy in the view."""
    src = sum(e.get("size", 0) for n, e in probe["entries"].items() if n in spec.local)
    return src + sum(v.get("size", 0) for n, v in probe["view"].items() if n in spec.local)


@dataclass(frozen=True)
class Checks:
    """What the preflight checks: sampled block geometry, full (b2sum) hashes, deep mode per view, and the
    names of files labkit did not make that it may replace."""

    block: int
    count: int
    full: bool
    deep: tuple[bool, ...]  # per view
    replace_foreign: frozenset[str] = frozenset()


def probe_and_assess(
    plan: LanePlan,
    specs: Sequence[StagingSpec],
    hosts: list[HostLike],
    checks: Checks,
    timeouts: Timeouts,
    jobs: NodeJobs,
) -> tuple[list[list[NodeAssessment]], list[dict[str, Source]]]:
    """Probe every node (in parallel, read-only), hash for the deep views, and assess each.

    The raw source blocks of local file j come from node j mod N only (spreading the transfer: fabric moves
    stdout slowly), every node compares its own copy with the source it reads itself. Full mode probes
    twice: sampled first (short timeout, gives the sizes), then with whole-file hashes, timed for their bytes."""
    names = [h.name for h in hosts]
    block, count, full = checks.block, checks.count, checks.full
    at = datetime.now(UTC).isoformat(timespec="seconds")

    def probe_one(h: HostLike, i: int, spec: StagingSpec) -> dict:
        k = names.index(h.name)
        send = [f for j, f in enumerate(spec.local) if j % len(names) == k]
        # in full mode the first probe is only for the sizes: its raw samples would travel twice
        first = () if full else send
        probe = probe_node(h, plan, spec, block, count, False, first, timeouts.node, jobs)
        if full:
            timeout = timeouts.for_bytes(_full_bytes(probe, spec), base=timeouts.node)
            probe = probe_node(h, plan, spec, block, count, True, send, timeout, jobs)
        if checks.deep[i]:
            hash_view(h, probe, spec, timeouts, jobs, at)
        return probe

    def probe_all(h: HostLike) -> list[dict]:
        return [probe_one(h, i, spec) for i, spec in enumerate(specs)]

    probes = each_node(hosts, probe_all, WHAT, jobs.stop, "the staging preflight")
    for i, spec in enumerate(specs):
        commits = {n: probes[n][i]["commit"] for n in names}
        if len(set(commits.values())) > 1:
            raise NodeError(
                f"{WHAT}: the nodes resolve {spec.repo}@{spec.revision} to different commits "
                "(is the shared cache the same on every node?)",
                {n: f"{spec.repo}@{spec.revision} is commit {c} here" for n, c in commits.items()},
            )
    try:
        sources = [
            sources_from([probes[n][i] for n in names], spec, block, count) for i, spec in enumerate(specs)
        ]
    except LabkitError as e:
        raise NodeError(WHAT, {names[0]: str(e).removeprefix(names[0] + ": ")})
    assessed: list[list[NodeAssessment]] = []
    errors: dict[str, str] = {}
    for i, spec in enumerate(specs):
        row = []
        for h in hosts:
            try:
                row.append(
                    assess(
                        probes[h.name][i],
                        spec,
                        block,
                        count,
                        full,
                        sources[i],
                        deep=checks.deep[i],
                        replace_foreign=checks.replace_foreign,
                    )
                )
            except LabkitError as e:
                errors.setdefault(h.name, str(e).removeprefix(h.name + ": "))
        assessed.append(row)
    if errors:
        raise NodeError(WHAT, errors)
    return assessed, sources
