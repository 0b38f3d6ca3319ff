"""The measured lane: stage, boot, measure each repetition into its own run folder, tear down (always).

Every repetition (`measure.runs`) is its own run folder, so tables show the median and spread across runs;
only the first after boot carries the cold turn.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labkit.errors import LabkitError
from labkit.lab.rooflines import RunRoofline, measured_roofline
from labkit.recipe import LanePlan

OVER_ROOFLINE = "over-roofline"  # a run flag: a figure above its ceiling (docs/roofline.md)

if TYPE_CHECKING:  # annotations only: the steps' packages load when a lane is measured
    from labkit.measure import BenchResult, NodeTelemetry
    from labkit.nodes import HostGroup, SshOptions
    from labkit.report import TargetCheck
    from labkit.serve import BootFacts, Endpoint, Lane
    from labkit.stage import StageReport
    from labkit.store import ResultsStore, Run


@dataclass
class LaneRun:
    """What `measure` did: the plan, the run folders it stored, and what boot and staging revealed."""

    plan: LanePlan
    run_dirs: list[Path] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)  # labkit.measure.BenchResult per run
    boot: BootFacts | None = None
    staging: StageReport | None = None
    target: TargetCheck | None = None  # after the last run, when measure.target_ci is set

    @property
    def run_ids(self) -> list[str]:
        return [p.name for p in self.run_dirs]


@dataclass
class BootHooks:
    """What a sweep adds to a shared boot (all optional): `booted(boot)` after the lane is up and before any
    request (raise to refuse the boot), `measured(done)` after each plan's runs, and `provenance`, more facts
    for every run's provenance (the sweep's name and axes). A plan whose runs fail ends the boot: Lane.up's
    exit then says whether the engine died, and the later plans are not measured on a broken engine."""

    booted: Callable[[BootFacts], None] | None = None
    measured: Callable[[LaneRun], None] | None = None
    provenance: dict = field(default_factory=dict)


def measure(
    plan: LanePlan,
    *,
    results: str | Path | None = None,
    ssh: SshOptions | None = None,
    full_verify: bool = False,
    progress: bool = True,
) -> LaneRun:
    """Stage, boot, measure `plan.measure.runs` times, store each run, tear down. Returns what was stored.

    Unreachable nodes fail before anything is created or started. A failure after the first run folder
    exists marks that run failed (not half-written); finished runs stay complete.
    """
    return measure_on_one_boot([plan], results=results, ssh=ssh, full_verify=full_verify, progress=progress)[
        0
    ]


def measure_on_one_boot(
    plans: list[LanePlan],
    *,
    results: str | Path | None = None,
    ssh: SshOptions | None = None,
    full_verify: bool = False,
    progress: bool = True,
    hooks: BootHooks | None = None,
) -> list[LaneRun]:
    """`measure` for several plans that differ only in request-side settings (measure.*): staged and booted
    once as the first, then each plan's runs in order, each stored under its own variant id; one teardown."""
    from labkit.nodes import SshOptions, hosts_for_plan

    group = hosts_for_plan(plans[0], ssh if ssh is not None else SshOptions.from_env())
    try:  # one SSH connection per node serves check, stage, boot, polling and teardown; closed at the end
        return _measure_on(plans, group, results, full_verify, progress, hooks or BootHooks())
    finally:
        group.close()


def run_provenance(plan: LanePlan, extra: dict | None = None) -> dict:
    """What every run of a lane records about where its plan came from (and `extra`, a sweep's facts)."""
    return {
        "recipe_file": plan.file,
        "variants": dict(plan.variants),
        "recipe_hash": plan.recipe_hash,
        "command": shlex.join(sys.argv),
        **(extra or {}),
    }


def _measure_on(
    plans: list[LanePlan],
    group: HostGroup,
    results: str | Path | None,
    full_verify: bool,
    progress: bool,
    hooks: BootHooks,
) -> list[LaneRun]:
    from labkit.nodes import check_reachable, ending_as_interrupt
    from labkit.serve import Lane
    from labkit.stage import check_view, stage
    from labkit.store import ResultsStore, RunFolderSink, write_staging

    plan = plans[0]
    check_reachable(group)
    served = Lane(plan, group=group, progress=sys.stderr if progress else None)
    served.refuse_if_present()  # before staging, and before a run folder exists: a busy lane changes nothing
    store = ResultsStore(results)
    dones = [LaneRun(p) for p in plans]
    done = dones[0]
    first = store.new_run(plan, provenance=run_provenance(plan, hooks.provenance))
    done.run_dirs.append(first.path)
    _announce(first.path)
    with first:  # a failure before the first run finished marks it failed, with the reason
        if plan.staging:
            with ending_as_interrupt():  # SIGTERM/SIGHUP stop the node copies like Ctrl-C does
                done.staging = stage(plan, group.hosts, full=full_verify, progress=progress)
                write_staging(first, done.staging.to_dict())
                check_view(plan, group.hosts)
        # The lane's node logs and boot facts go into the first run folder as the boot goes.
        served.sink = RunFolderSink(first.path)
        with (
            ending_as_interrupt()
        ):  # as inside Lane.up: SIGTERM/SIGHUP during a build mark the run interrupted
            materialize_model(served)
        with served.up() as endpoint:
            first.update(boot=endpoint.boot.to_dict())
            if hooks.booted:
                hooks.booted(endpoint.boot)
            for k, (each, d) in enumerate(zip(plans, dones, strict=True)):
                d.boot, d.staging = endpoint.boot, done.staging
                first_run = first if k == 0 else None
                _repeat(each, endpoint, store, first_run, d, list(group.hosts), progress, first.run_id, hooks)
                if hooks.measured:
                    hooks.measured(d)
    return dones


def _repeat(
    plan: LanePlan,
    endpoint: Endpoint,
    store: ResultsStore,
    first: Run | None,
    done: LaneRun,
    hosts: list,
    progress: bool,
    boot_run: str,
    hooks: BootHooks,
) -> None:
    """`measure.runs` repetitions on the booted lane, each its own run folder (the first is `first`, the
    boot's own folder, or None for a later plan on a shared boot); with `measure.target_ci`, more until every
    target measure's interval is that tight or `max_runs` is reached. Each run records where the target stood
    after it (docs/measurement.md, "Repeating until the interval is tight")."""
    from labkit.measure import BenchOptions, NodeNfsProbe, run_bench
    from labkit.report import check_target

    boot = endpoint.boot.to_dict()
    provenance = run_provenance(plan, hooks.provenance)
    once = dataclasses.replace(plan.measure, runs=1)  # each repetition is its own run folder
    m = plan.measure
    values: dict[str, list[float | None]] = {name: [] for name in m.ci_measures()}
    cap = m.ci_run_cap()
    probes = [NodeNfsProbe(h) for h in hosts]
    for i in range(cap):
        run = (
            first
            if i == 0 and first is not None
            else store.new_run(plan, provenance=provenance, boot=boot, boot_run=boot_run)
        )
        if run is not first:
            done.run_dirs.append(run.path)
        cold = i == 0 and first is not None  # only the boot's first run meets a cold engine
        with run:
            result = run_bench(
                endpoint.base_url,
                once,
                BenchOptions(
                    model=endpoint.model,
                    cold_expected=cold,
                    io_hooks=probes,
                    progress=progress,
                    run_id=run.run_id,
                    on_partial=functools.partial(write_records, run),
                    prompt_seed=None if m.seed is None else f"{m.seed}/{i}",
                    telemetry=node_telemetry(plan, hosts, store.root),
                    kv_pool=boot.get("kv_pool"),  # read at boot from the log and the API
                ).with_lane(plan),
            )
            done.results.append(result)
            refuse_empty(run, result)
            if m.target_ci is not None:
                for name, vals in values.items():
                    vals.append(result.summary.measures.get(name))
                done.target = check_target(values, m.target_ci, i + 1)
                run.update(target=done.target.to_dict())
                if progress:
                    print(done.target.line(cap), file=sys.stderr, flush=True)
            keep(run, result, plan, boot, [h.name for h in hosts], store.root)
        if done.target is not None and done.target.reached and i + 1 >= m.runs:
            break


def refuse_empty(run: Run, result: BenchResult) -> None:
    """A run where no request succeeded is no result: its records are kept and the run fails, naming why."""
    if result.summary.n_ok == 0:
        write_records(run, result)
        raise LabkitError(
            f"run {run.run_id}: no request succeeded "
            f"({result.summary.n_failed} failed): " + "; ".join(result.summary.notes)[:400]
        )


def node_telemetry(plan: LanePlan, hosts: list, root: Path) -> NodeTelemetry | None:
    """One run's node samplers (None when measure.telemetry_period is 0), with each node's healthy SM-clock
    baseline from the results folder (docs/measurement.md, "Node telemetry")."""
    from labkit.measure import NodeTelemetry
    from labkit.store import read_baselines

    m = plan.measure
    if not m.telemetry_period:
        return None
    baseline = read_baselines(root, [h.name for h in hosts])
    return NodeTelemetry(hosts, period_s=m.telemetry_period, clock_baseline=baseline, clock_drop=m.clock_drop)


def materialize_model(served: Lane) -> None:
    """Point a Lane that is about to start at the labkit-built model its recipe names ("labkit/tiny-llama"),
    building it on first use (serve never builds models); any other lane is left as it is. Used by `measure`
    and `labkit up` just before Lane.start, which checks the nodes again (such a lane is local: a cached
    build costs a file check); the build's progress goes where the lane's does."""
    from labkit import tinymodel

    served.plan = tinymodel.materialize(served.plan, log=served.progress)


def keep(run: Run, result: BenchResult, plan: LanePlan, boot: dict, nodes: list[str], root: Path) -> None:
    """Store one measured run with the flags its boot and its canary raise; a healthy run then moves its nodes'
    SM-clock baselines and its lane's canary baseline (labkit/store/baselines.py)."""
    from labkit.measure import LOW_CLOCK, healthy_clocks
    from labkit.store import update_baselines, update_canary

    canary = canary_flags(plan, result, nodes, root)
    roof = measured_roofline(plan, boot, result)
    store_result(run, result, boot, boot_flags(plan, boot) + canary, roof)
    clocks = healthy_clocks(result.summary.telemetry or {})
    if clocks:
        update_baselines(root, clocks, run.run_id)
    ms = result.summary.measures.get("canary_ms")
    if ms is not None and not canary and LOW_CLOCK not in {f["code"] for f in result.summary.flags}:
        update_canary(root, plan.recipe_hash, nodes, ms, run.run_id)


def canary_flags(plan: LanePlan, result: BenchResult, nodes: list[str], root: Path) -> list[dict]:
    """`slow-canary` when the run's canary is more than the plan's bound above this lane's healthy baseline on
    these nodes (none before the first healthy run; docs/measurement.md, "Slow-state canary")."""
    from labkit.measure import canary_flag
    from labkit.store import read_canary

    c = plan.measure.canary
    ms = result.summary.measures.get("canary_ms")
    if c is None or ms is None:
        return []
    flag = canary_flag(ms, read_canary(root, plan.recipe_hash, nodes), c.slow, nodes)
    return [flag] if flag else []


def boot_flags(plan: LanePlan, boot: dict) -> list[dict[str, str]]:
    """The run flags the boot itself raises: `socket-fallback` when a lane with RoCE HCAs used sockets
    (labkit.serve.transport; docs/engines.md, "NCCL transport lines"), `cold-compile-cache` when a node's
    engine found its compile caches empty ("Boot state")."""
    from labkit.serve import cold_cache_flags, socket_fallback_flags

    fabric = plan.cluster.fabric
    hcas = fabric.hcas if fabric is not None else ()
    return socket_fallback_flags(boot.get("transport") or {}, hcas) + cold_cache_flags(
        boot.get("state") or {}
    )


def store_result(
    run: Run,
    result: BenchResult,
    boot: dict,
    flags: Sequence[Mapping[str, str]] = (),
    roofline: RunRoofline | None = None,
) -> None:
    """Write one BenchResult into its run folder and finish it; boot's KV pool facts, its `flags` and the
    roofline's ceilings and shares join the summary (the tables mark flagged runs: a share above 100 % is one,
    docs/roofline.md), the roofline's facts the run.json."""
    write_records(run, result)
    summary = result.summary
    summary.flags += [dict(f) for f in flags]
    if roofline is not None:
        shares = roofline.shares(summary.measures)
        summary.measures.update(shares)
        summary.method.update({key: roofline.method(key) for key in shares})
        summary.flags += over_roofline(shares)
        run.update(roofline=roofline.to_dict())
    for key in ("kv_pool_tokens", "kv_pool_context"):
        if boot.get(key) is not None:  # the boot log's figure wins over the API's (docs/engines.md)
            summary.measures[key] = boot[key]
            summary.method[key] = "engine boot log"
    run.finish(summary, boot=boot, provenance=result.provenance)


def over_roofline(shares: Mapping[str, float]) -> list[dict[str, str]]:
    """`over-roofline` for each share above 100 %: the bytes model or the measurement is wrong."""
    return [
        {
            "code": OVER_ROOFLINE,
            "window": key,
            "message": f"{value:.1f} % of its ceiling: the model of bytes or the figure is wrong",
        }
        for key, value in shares.items()
        if key.endswith(("_roofline", "_compute")) and value > 100.0
    ]


def write_records(run: Run, result: BenchResult) -> None:
    """The raw files of a BenchResult into a still-open run folder (labkit.store.write_result); also used for
    a run that fails halfway: its folder is then marked failed, with what it measured."""
    from labkit.store import write_result

    write_result(run, result)


def _announce(path: Path) -> None:
    """Tell a notebook runner which run folder this is (so it can copy the executed notebook there)."""
    try:
        from labkit.notebooks import record

        if "ipykernel" in sys.modules:
            record("run_dir", str(path))
    except Exception:  # noqa: BLE001 - outside a kernel there is nobody to tell
        pass
