"""`lab.sweep`: one recipe key (or several, as a grid or zipped) walked across values, each point booted,
measured and torn down like any lane and stored as ordinary run folders, with a sweep record saying which
runs make each point (docs/sweeps.md).

Every point is resolved, and a swept engine flag checked against the engine's own --help, before the first
boot, so a typo fails in seconds. Points that differ only in request-side settings (measure.*) share one
boot. A re-run resumes: points stored with identical provenance are skipped (labkit/lab/resume.py). A point
whose boot or runs fail is recorded with the reason and the sweep goes on.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from labkit.errors import LabkitError, RecipeError
from labkit.lab.resolve import choices_for, overridden
from labkit.lab.resume import Resume, SweepRefused, boot_fingerprint, plan_resume
from labkit.lab.runs import BootHooks, LaneRun, measure_on_one_boot
from labkit.nodes import SshOptions
from labkit.recipe import LanePlan, SweepAxis, expand, find_recipe, load_recipe, parse_over, resolve_point
from labkit.store import (
    StoredRun,
    SweepAxisRecord,
    SweepPoint,
    SweepRecord,
    read_run,
    results_root,
    sweep_path,
    write_sweep,
)

if TYPE_CHECKING:
    from labkit.serve import Check, EnvLever


@dataclass
class SweepRun:
    """What `sweep` did: the record (as written), its file, every point's plan, and the lanes measured now."""

    record: SweepRecord
    path: Path
    plans: dict[str, LanePlan]
    results: Path
    lanes: dict[str, LaneRun] = field(default_factory=dict)
    loaded: Any = field(default=None, repr=False)  # the stored results, read once after the sweep ended

    def stored(self) -> Any:
        """The results folder as labkit.store.Results, loaded on first use (table, figure and plot share it)."""
        from labkit.store import load_results

        if self.loaded is None:
            self.loaded = load_results(self.results)
        return self.loaded

    @property
    def failed(self) -> list[SweepPoint]:
        return [p for p in self.record.points if p.status == "failed"]

    def check(self) -> None:
        """LabkitError naming every failed point (the notebook's last cell: a run with failures fails)."""
        if self.failed:
            raise LabkitError(
                f"{len(self.failed)} of {len(self.record.points)} sweep points failed: "
                + "; ".join(f"{p.variant_id}: {p.reason[:200]}" for p in self.failed)
            )


@dataclass
class SweepPlan:
    """A sweep resolved before anything boots: the record's name, its axes, and one plan per point."""

    recipe: str
    name: str
    base_variants: dict[str, str]
    axes: list[SweepAxis]
    zipped: bool
    points: list[tuple[tuple[SweepAxis, Any], ...]]
    plans: list[LanePlan]

    def new_record(self) -> SweepRecord:
        axes = [SweepAxisRecord(list(a.key), a.dotted, a.short, list(a.values)) for a in self.axes]
        points = [
            SweepPoint(plan.variant_id, {a.short: v for a, v in point})
            for point, plan in zip(self.points, self.plans, strict=True)
        ]
        return SweepRecord(self.name, self.recipe, self.base_variants, axes, self.zipped, points)

    @property
    def engine_swept(self) -> bool:
        """Whether a swept key is the engine itself (its image, version or kind): then points differ in image
        and engine version by design, and resume does not hold them to one."""
        return any(
            a.key[:2] in (("engine", "image"), ("engine", "version"), ("engine", "kind")) for a in self.axes
        )

    def boot_groups(self) -> list[list[int]]:
        """Point indexes by boot: points whose non-measure values agree share one boot, in first-seen order."""
        groups: dict[tuple, list[int]] = {}
        for i, point in enumerate(self.points):
            key = tuple((a.short, repr(v)) for a, v in point if a.key[0] != "measure")
            groups.setdefault(key, []).append(i)
        return list(groups.values())


def sweep_plan(
    recipe: str = "sim",
    over: str | Sequence[str] | None = (),
    *,
    spec: str | None = None,
    staging: str | None = None,
    variants: dict[str, str] | None = None,
    zipped: bool = False,
    name: str | None = None,
    nodes: str | list[str] | None = None,
    runs: int | None = None,
) -> SweepPlan:
    """Every point resolved (RecipeError naming the recipe file and the `--over` key on a bad key or value).
    `over`: one KEY=V1,V2,... per axis; a string may hold several separated by " ; " (the notebook's form)."""
    rec = load_recipe(find_recipe(recipe))
    specs = [s.strip() for s in over.split(" ; ")] if isinstance(over, str) else list(over or ())
    if not specs:
        raise RecipeError(
            "--over", "", 'give at least one KEY=V1,V2,... (e.g. engine.args."--max-num-seqs"=4,8)'
        )
    axes = [parse_over(s) for s in specs]
    if len({a.short for a in axes}) < len(axes):
        shared = next(a for a in axes if [b.short for b in axes].count(a.short) > 1)
        raise RecipeError(
            "--over",
            shared.text,
            f"two swept keys share the short name {shared.short!r}: name one, NAME:KEY=...",
        )
    choices = choices_for(rec, spec, staging, variants)
    base = rec.resolve(choices)
    points = expand(axes, zipped)
    plans = [overridden(resolve_point(rec, choices, p), nodes, runs) for p in points]
    ids = [p.variant_id for p in plans]
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise RecipeError(
            "--over",
            " ".join(specs),
            f"two points get the variant id {twice[0]}: use values that differ in letters or digits",
        )
    label = name or f"{base.variant_id}_over_{'-'.join(a.short for a in axes)}"
    return SweepPlan(rec.name, label, dict(base.variants), axes, zipped, points, plans)


def check_before_boot(
    sp: SweepPlan,
    plans: Sequence[LanePlan],
    ssh: SshOptions | None,
    progress: bool,
    allowed_env: Mapping[str, str] | None = None,
) -> None:
    """The nodes reachable (NodeError naming each one that is not), then, once per image among `plans` (a
    sweep over engine.image checks each): swept engine flags against the engine's own --help on the head, else
    labkit's list of its known flags (docs/engines.md, "Known flags and the sweep flag check"), and the
    engine-named environment variables the points set against the engine's code (serve/envcheck.py; a name
    in `allowed_env` passes with its reason). All before any boot, so none wastes one."""
    from labkit.nodes import check_reachable
    from labkit.serve import Lane, check_env, check_flags, split_levers

    flags = [(a.key[2], f"swept by --over {a.text}") for a in sp.axes if a.key[:2] == ("engine", "args")]
    by_image: dict[str | None, list[LanePlan]] = {}
    for plan in plans:
        by_image.setdefault(plan.engine.image, []).append(plan)
    for image_plans in by_image.values():
        plan = image_plans[0]
        levers, unchecked = split_levers(env_levers(sp, image_plans))
        lane = Lane(plan, ssh=ssh, progress=sys.stderr if progress else None)
        try:
            check_reachable(lane.group)
            if unchecked:
                lane.state.say(
                    "not checked, read by other libraries than the engine's: "
                    + ", ".join(f"{x.name} ({x.origin})" for x in unchecked)
                )
            checks = check_flags(lane.state, flags) if flags else []
            checks += check_env(lane.state, levers, allowed_env)
        finally:
            lane.close()
        for c in checks:
            if c.check == "env" and not c.failed:
                lane.state.say(f"{c.node}: {c.result}")
        _refuse(plan, flags, [c for c in checks if c.failed])


def env_levers(sp: SweepPlan, plans: Sequence[LanePlan]) -> list[EnvLever]:
    """The environment variables a sweep sets: its swept engine.env keys, then each point's engine.env names."""
    from labkit.serve import EnvLever

    out = [EnvLever(a.key[2], f"swept by --over {a.text}") for a in sp.axes if a.key[:2] == ("engine", "env")]
    return out + [EnvLever(name, "engine.env") for plan in plans for name, _ in plan.engine.env]


def _refuse(plan: LanePlan, flags: Sequence[tuple[str, str]], failed: Sequence[Check]) -> None:
    """A RecipeError naming every flag and environment variable that failed its check, with the checks' words."""
    if not failed:
        return
    named = [
        str(c.facts.get("flag") or c.facts.get("name"))
        for c in failed
        if c.facts.get("flag") or c.facts.get("name")
    ]
    text = "; ".join(f"{c.node}: {c.result}" for c in failed)
    raise RecipeError(plan.file, f"--over {', '.join(named or [f for f, _ in flags])}", text)


def check_folders(sp: SweepPlan, root: Path) -> None:
    """RecipeError when a point's results folder already holds runs of another key under the same short
    name (two sweeps whose keys share initials would mix their lanes); NAME:KEY=... picks another name."""
    for point, plan in zip(sp.points, sp.plans, strict=True):
        for doc_file in sorted((root / sp.recipe / plan.variant_id).glob("*/run.json"))[:20]:
            try:
                axes = read_run(doc_file.parent).provenance.sweep_axes
            except LabkitError:
                continue
            for axis, _ in point:
                theirs = axes.get(axis.short)
                if theirs is not None and tuple(theirs) != axis.key:
                    raise RecipeError(
                        "--over",
                        axis.text,
                        f"{doc_file.parent.parent} holds a sweep over {'.'.join(theirs)} under the short name "
                        f"{axis.short!r}; name this axis another way: 'NAME:{axis.dotted}=...'",
                    )


def _stored_docs(root: Path, record: SweepRecord) -> dict[str, StoredRun]:
    docs = {}
    for point in record.points:
        for run_id in point.runs:
            try:
                docs[run_id] = read_run(root / record.recipe / point.variant_id / run_id)
            except LabkitError:  # gone or unreadable: the point is measured again
                continue
    return docs


def _resume(sp: SweepPlan, root: Path, fresh: bool) -> tuple[SweepRecord, Resume]:
    """The record this run writes (earlier points carried over when resumed) and what it may skip."""
    from labkit.store import read_sweep

    record = sp.new_record()
    path = sweep_path(root, sp.recipe, sp.name)
    if fresh or not path.is_file():
        return record, Resume(engine_swept=sp.engine_swept)
    old = read_sweep(path)
    label = f"{sp.recipe}/{sp.name}"
    resume = plan_resume(old.points, sp.plans, _stored_docs(root, old), label, sp.engine_swept)
    for point in record.points:
        if point.variant_id in resume.done:
            point.status, point.runs = "resumed", resume.done[point.variant_id]
    ids = {p.variant_id for p in record.points}
    record.points += [p for p in old.points if p.variant_id not in ids]  # kept, not lost to a typo in --over
    return record, resume


def _say(progress: bool, text: str) -> None:
    if progress:
        print(f"sweep: {text}", file=sys.stderr, flush=True)


def sweep(
    recipe: str = "sim",
    over: str | Sequence[str] | None = (),
    *,
    spec: str | None = None,
    staging: str | None = None,
    variants: dict[str, str] | None = None,
    zipped: bool = False,
    fresh: bool = False,
    name: str | None = None,
    nodes: str | list[str] | None = None,
    runs: int | None = None,
    results: str | Path | None = None,
    ssh: SshOptions | None = None,
    progress: bool = True,
    allowed_env: Mapping[str, str] | None = None,
) -> SweepRun:
    """Resolve every point, check swept flags and engine-named environment variables (`allowed_env`: {name:
    reason} of those to run even though the engine's code never mentions them, kept in the record), skip
    points already measured, then boot, measure and tear down each remaining boot group in turn, rewriting
    the sweep record after every point."""
    sp = sweep_plan(
        recipe,
        over,
        spec=spec,
        staging=staging,
        variants=variants,
        zipped=zipped,
        name=name,
        nodes=nodes,
        runs=runs,
    )
    if progress:
        for line in sorted({staging_line(p) for p in sp.plans}):
            print(f"sweep: {line}", file=sys.stderr)
    root = results_root(results)
    check_folders(sp, root)  # before resume: two keys under one short name is the clearer refusal
    record, resume = _resume(sp, root, fresh)
    record.allowed_env = {**record.allowed_env, **(allowed_env or {})}
    # the plan's points come first in the record; points kept from an earlier --over follow, never booted
    todo = [i for i, p in enumerate(record.points[: len(sp.plans)]) if p.status != "resumed"]
    if todo:
        check_before_boot(sp, [sp.plans[i] for i in todo], ssh, progress, allowed_env)
    out = SweepRun(record, write_sweep(root, record), {p.variant_id: p for p in sp.plans}, results=root)
    groups = [[i for i in g if i in todo] for g in sp.boot_groups()]
    groups = [g for g in groups if g]
    _say(
        progress,
        f"{sp.recipe}/{sp.name}: {len(record.points)} point(s), {len(record.points) - len(todo)} already "
        f"measured, {len(todo)} to measure on {len(groups)} boot(s)",
    )
    for n, group in enumerate(groups, 1):
        _run_group(sp, out, resume, group, n, len(groups), results, ssh, progress)
    return out


def _run_group(
    sp: SweepPlan,
    out: SweepRun,
    resume: Resume,
    group: list[int],
    n: int,
    total: int,
    results: str | Path | None,
    ssh: SshOptions | None,
    progress: bool,
) -> None:
    """One boot: its points measured in order, each recorded as it ends; a boot failure fails them all."""
    record, points = out.record, [out.record.points[i] for i in group]
    shown = ", ".join(" ".join(f"{k}={v}" for k, v in p.values.items()) for p in points)
    _say(progress, f"boot {n}/{total}: {shown}")

    def measured(done: LaneRun) -> None:
        point = record.point(done.plan.variant_id)
        point.status, point.runs, point.reason = "measured", done.run_ids, ""
        out.lanes[point.variant_id] = done
        write_sweep(out.results, record)

    def booted(boot: Any) -> None:  # before any request: the same engine as the points already stored
        resume.check_boot(boot_fingerprint(sp.plans[group[0]], boot.to_dict()))

    axes = {a.short: list(a.key) for a in sp.axes}  # lets the comparability gate expect the swept keys
    hooks = BootHooks(booted, measured, {"sweep": {"name": f"{sp.recipe}/{sp.name}", "axes": axes}})
    try:
        measure_on_one_boot(
            [sp.plans[i] for i in group], results=results, ssh=ssh, progress=progress, hooks=hooks
        )
    except SweepRefused:
        write_sweep(out.results, record)
        raise
    except LabkitError as e:  # the boot, or a point on it, failed: the lane is down, its open points fail
        first = next((p for p in points if p.status == "pending"), None)
        up = any(p.status == "measured" for p in points) or "no request succeeded" in str(e)
        for point in points:
            if point.status != "pending":
                continue
            if point is first:
                point.reason = ("" if up else "boot failed: ") + str(e)[:500]
            else:
                assert first is not None  # `point` is pending, so a first pending point exists
                point.reason = f"not measured: point {first.variant_id} failed on their shared boot"
            point.status = "failed"
        write_sweep(out.results, record)
        _say(progress, f"boot {n}/{total} failed: {str(e)[:300]}")
        _stop_if_left(sp.plans[group[0]], ssh)
    except BaseException:  # Ctrl-C: the lane was torn down; the record keeps what ended
        write_sweep(out.results, record)
        raise


def _stop_if_left(plan: LanePlan, ssh: SshOptions | None) -> None:
    """After a failed boot: if the lane is still on a node (its teardown failed), stop the sweep rather than
    boot the next point beside it."""
    from labkit.serve import Lane

    lane = Lane(plan, ssh=ssh, progress=None)
    try:
        left = lane.leftovers()
    except LabkitError:
        return  # a node that cannot be asked: the next boot's own checks name it
    finally:
        lane.close()
    if left:
        raise LabkitError(
            f"lane {lane.lane_id} is still on {', '.join(sorted(left))} after its point failed; the sweep stops "
            "so no other point boots beside it: "
            + "; ".join(f"{n}: {t[:200]}" for n, t in sorted(left.items()))
        )


def staging_line(plan: LanePlan) -> str:
    """Where the points read the model from: what the staging variant stages on every node, else the shared
    cache it is read from. Printed before a sweep, since a NAS-bound lane's prefill measures the NAS."""
    name = dict(plan.variants).get("staging")
    label = f"staging {name}" if name else "staging"
    if plan.staging:
        staged = "; ".join(f"{s.kind} {s.repo} at {s.dst}" for s in plan.staging)
        return f"{label}: {staged}, staged on every node before its boot"
    cache = plan.cluster.shared_cache
    where = f"from the shared cache {cache}" if cache else "as the engine args name it"
    return f"{label}: nothing staged; the model is read {where}"


def describe_sweep(sp: SweepPlan) -> str:
    """The resolved points, where they read the model from, and how they share boots (nothing is contacted)."""
    lines = [
        f"sweep {sp.recipe}/{sp.name}: "
        + ("zipped " if sp.zipped else "grid ")
        + " × ".join(a.dotted for a in sp.axes),
        *sorted({staging_line(p) for p in sp.plans}),
    ]
    for n, group in enumerate(sp.boot_groups(), 1):
        lines.append(f"boot {n}:")
        for i in group:
            values = ", ".join(f"{a.dotted} = {v!r}" for a, v in sp.points[i])
            lines.append(f"  {sp.plans[i].variant_id}: {values}")
    return "\n".join(lines)


def estimate_sweep(sp: SweepPlan, results: str | Path | None = None) -> str:
    """The sweep's expected duration: every point's requests at its own stored speed, else at the base lane's,
    plus one boot per boot group at the base lane's stored boot time (labkit/lab/timing.py)."""
    from labkit.lab.timing import duration, estimate
    from labkit.store import load_results

    data = load_results(results)
    base = load_recipe(find_recipe(sp.recipe)).resolve(sp.base_variants)
    each = [estimate(p, like=base, data=data) for p in sp.plans]
    boots = len(sp.boot_groups())
    known = [e.measure_s for e in each if e.measure_s is not None]
    boot = estimate(base, data=data).boot_s
    if len(known) < len(each):
        return (
            f"estimate: {sum(e.requests for e in each)} requests over {len(each)} points and {boots} boots; "
            + ("no stored or recorded speed of this lane to time them")
        )
    total = sum(known) + boots * (boot or 0.0)
    how = (
        f"{boots} boots at {duration(boot)} each"
        if boot is not None
        else f"{boots} boots, their time unknown"
    )
    return (
        f"estimate: ~{duration(total)} ({sum(e.requests for e in each)} requests over {len(each)} points, "
        f"{duration(sum(known))} of measuring; {how}); from {each[0].used[0]}"
    )


def sweep_tables(sw: SweepRun) -> list[Any]:
    """The sweep's table(s) from the stored files, as `labkit report` builds them (the "sweeps" tables of
    tables.toml, for just this record)."""
    from labkit import report

    data = sw.stored()
    _, specs = report.load_spec(report.spec_path(data.root))
    chosen = [s for s in specs if s.is_sweep]
    if not chosen:  # a results folder whose tables.toml has no sweep table: the checkout's
        chosen = [s for s in report.load_spec(report.default_spec_file())[1] if s.is_sweep]
    return report.stored_tables(data, chosen, sweeps=[sw.record])


def sweep_figure(sw: SweepRun) -> Any:
    """Each headline measure against the swept value, with intervals over runs, from the stored files."""
    from labkit import report

    return report.sweep_figure(sw.record, sw.stored())


def save_sweep_figure(sw: SweepRun, out: str | Path | None = None) -> Path | None:
    """The sweep plot as PNG: `out`, else the file `labkit report` rewrites beside TABLES.md
    (plots/sweep-<recipe>-<name>.png); None when no point has a stored run."""
    from labkit import report

    if not any(p.runs for p in sw.record.points):
        return None
    return report.save_png(sweep_figure(sw), out or report.sweep_plot_path(sw.results / "plots", sw.record))
