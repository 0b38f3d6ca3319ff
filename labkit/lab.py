"""One lane end to end, the way the bench notebook and `make bench` run it:

    plan = lab.plan("dsv41", spec="dspark")      # recipe.toml --resolve--> LanePlan
    print(lab.describe(plan))                    # dry run: the plan and each node's exact command
    done = lab.measure(plan)                     # --stage--> view --up--> endpoint --measure--> records
                                                 # --store--> results/<recipe>/<variant>/<run-id>/
    lab.tables(done)                             # --report--> tables, regenerated from the stored files

Teardown always happens: `measure` boots inside `Lane.up()`, whose exit removes and verifies the lane on
every node whatever happened in between. Every repetition (`measure.runs`) is its own run folder, so tables
show the median and min–max across runs; only the first after boot carries the cold turn.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit import settings
from labkit.errors import LabkitError
from labkit.recipe import LanePlan, find_recipe, load_recipe, with_nodes


@dataclass
class LaneRun:
    """What `measure` did: the plan, the run folders it stored, and what boot and staging revealed."""

    plan: LanePlan
    run_dirs: list[Path] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)  # labkit.measure.BenchResult per run
    boot: Any = None  # labkit.serve.BootFacts
    staging: Any = None  # labkit.stage.StageReport

    @property
    def run_ids(self) -> list[str]:
        return [p.name for p in self.run_dirs]


def plan(
    recipe: str = "sim",
    spec: str | None = None,
    staging: str | None = None,
    *,
    nodes: str | list[str] | None = None,
    runs: int | None = None,
    variants: dict[str, str] | None = None,
) -> LanePlan:
    """Resolve a recipe with variants and optional overrides (nodes, runs) into a LanePlan.

    `spec`/`staging` given as None or "none" on a recipe without that axis are ignored, so one notebook
    default works for every recipe; any other value on a missing axis is an error naming the recipe.
    """
    rec = load_recipe(find_recipe(recipe))
    choices = dict(variants or {})
    for axis, value in (("spec", spec), ("staging", staging)):
        if value is None or (value == "none" and axis not in rec.axes):
            continue
        choices[axis] = value
    lane = rec.resolve(choices)
    if nodes:  # names and tp*pp*dp = nodes x gpus_per_node checked again (labkit.recipe.with_nodes)
        lane = with_nodes(lane, nodes)
    if runs:
        lane = dataclasses.replace(lane, measure=dataclasses.replace(lane.measure, runs=int(runs)))
    return lane


def commands(lane: LanePlan) -> dict[str, str]:
    """{node: the exact command it would run}, pointing at where a labkit-built model will be (nothing is
    built or contacted); the plan itself stays as resolved."""
    from labkit import tinymodel
    from labkit.serve import lane_commands

    return lane_commands(tinymodel.materialize(lane, build=False))


def describe(lane: LanePlan) -> str:
    """The resolved plan and the exact command each node would run (nothing is contacted)."""
    from labkit.recipe import describe_plan

    return describe_plan(lane, commands(lane))


def spec_k(lane: LanePlan) -> int | None:
    """K (draft tokens per step) when the recipe states it; None lets the measurement read it from /metrics."""
    from labkit.measure import configured_k

    found = configured_k(lane.engine)
    return found[0] if found else None


def measure(
    lane: LanePlan,
    *,
    results: str | Path | None = None,
    ssh: Any = None,
    full_verify: bool = False,
    progress: bool = True,
) -> LaneRun:
    """Stage, boot, measure `lane.measure.runs` times, store each run, tear down. Returns what was stored.

    Unreachable nodes fail before anything is created or started. A failure after the first run folder
    exists marks that run failed (not half-written); finished runs stay complete.
    """
    from labkit.nodes import SshOptions, hosts_for_plan

    group = hosts_for_plan(lane, ssh if ssh is not None else SshOptions.from_env())
    try:  # one SSH connection per node serves check, stage, boot, polling and teardown; closed at the end
        return _measure_on(lane, group, results, full_verify, progress)
    finally:
        group.close()


def _measure_on(
    lane: LanePlan, group: Any, results: str | Path | None, full_verify: bool, progress: bool
) -> LaneRun:
    from labkit.measure import NodeNfsProbe, configured_k, run_bench
    from labkit.nodes import check_reachable, ending_as_interrupt
    from labkit.serve import Lane
    from labkit.stage import check_view, stage
    from labkit.store import ResultsStore

    check_reachable(group)
    served = Lane(lane, group=group, progress=sys.stderr if progress else None)
    served.refuse_if_present()  # before staging, and before a run folder exists: a busy lane changes nothing
    store = ResultsStore(results)
    done = LaneRun(lane)
    provenance = {
        "recipe_file": lane.file,
        "variants": dict(lane.variants),
        "recipe_hash": lane.recipe_hash,
        "command": shlex.join(sys.argv),
    }
    first = store.new_run(lane, provenance=provenance)
    done.run_dirs.append(first.path)
    _announce(first.path)
    with first:  # a failure before the first run finished marks it failed, with the reason
        if lane.staging:
            with ending_as_interrupt():  # SIGTERM/SIGHUP stop the node copies like Ctrl-C does
                done.staging = stage(lane, group.hosts, full=full_verify, progress=progress)
                first.write_text("staging.json", _json(done.staging.to_dict()))
                check_view(lane, group.hosts)
        # Lane writes boot.json and logs/<node>.log into the first run folder as the boot goes.
        served.run_dir = first.path
        with (
            ending_as_interrupt()
        ):  # as inside Lane.up: SIGTERM/SIGHUP during a build mark the run interrupted
            materialize_model(served)
        with served.up() as endpoint:
            done.boot = endpoint.boot
            boot = endpoint.boot.to_dict()
            first.update(boot=boot)
            probes = [NodeNfsProbe(h) for h in group.hosts]
            once = dataclasses.replace(lane.measure, runs=1)  # each repetition is its own run folder
            k_found = configured_k(lane.engine)  # K from the recipe, with where it came from
            for i in range(lane.measure.runs):
                run = (
                    first
                    if i == 0
                    else store.new_run(lane, provenance=provenance, boot=boot, boot_run=first.run_id)
                )
                if i:
                    done.run_dirs.append(run.path)
                with run:
                    result = run_bench(
                        endpoint.base_url,
                        once,
                        model=endpoint.model,
                        cold_expected=(i == 0),
                        io_hooks=probes,
                        progress=progress,
                        lane=lane.label,
                        recipe_hash=lane.recipe_hash,
                        variant=lane.variant_id,
                        spec_k=k_found[0] if k_found else None,
                        spec_k_source=k_found[1] if k_found else "",
                        run_id=run.run_id,
                        on_partial=lambda partial, run=run: write_records(run, partial),
                    )
                    done.results.append(result)
                    if result.summary.n_ok == 0:  # a folder of failures is not a result: keep it, failed
                        write_records(run, result)
                        raise LabkitError(
                            f"run {run.run_id}: no request succeeded "
                            f"({result.summary.n_failed} failed): " + "; ".join(result.summary.notes)[:400]
                        )
                    store_result(run, result, boot)
    return done


def materialize_model(served: Any) -> None:
    """Point a Lane that is about to start at the labkit-built model its recipe names ("labkit/tiny-llama"),
    building it on first use (serve never builds models); any other lane is left as it is. Used by `measure`
    and `labkit up` just before Lane.start, which checks the nodes again (such a lane is local: a cached
    build costs a file check); the build's progress goes where the lane's does."""
    from labkit import tinymodel

    served.plan = tinymodel.materialize(served.plan, log=served.progress)


def store_result(run: Any, result: Any, boot: dict) -> None:
    """Write one BenchResult into its run folder and finish it; boot's KV pool facts join the summary."""
    write_records(run, result)
    summary = result.summary
    for key in ("kv_pool_tokens", "kv_pool_context"):
        if boot.get(key) is not None and summary.measures.get(key) is None:
            summary.measures[key] = boot[key]
            summary.method[key] = "engine boot log"
    run.finish(summary, boot=boot, provenance=result.provenance)


def write_records(run: Any, result: Any) -> None:
    """The raw files of a BenchResult (requests, groups, scrapes, I/O deltas) into a still-open run folder.
    Also used for a run that fails halfway: its folder is then marked failed, with what it measured."""
    run.write_requests(result.records)
    if result.groups:
        run.write_text("groups.csv", _csv([g.to_row() for g in result.groups]))
    if result.scrapes:
        run.write_text("metrics.json", _json(result.scrapes))
    if result.io:
        run.write_text("io.json", _json(result.io))
    if result.provenance.get("partial"):
        run.update(partial={"requests": len(result.records), "error": result.provenance.get("error")})


def _csv(rows: list[dict]) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _json(data: Any) -> str:
    import json

    return json.dumps(data, indent=1, default=str) + "\n"


def _announce(path: Path) -> None:
    """Tell a notebook runner which run folder this is (so it can copy the executed notebook there)."""
    try:
        from labkit.notebooks import record

        if "ipykernel" in sys.modules:
            record("run_dir", str(path))
    except Exception:  # noqa: BLE001 - outside a kernel there is nobody to tell
        pass


def _measures(done: LaneRun, results: str | Path | None) -> tuple[Any, Any]:
    """(stored results, their measures rows for just these runs): what tables and figures are built from."""
    from labkit.store import load_results

    data = load_results(results)
    return data, data.measures[data.measures["run"].isin(done.run_ids)]


def tables(done: LaneRun, results: str | Path | None = None) -> list[Any]:
    """The measured-lanes table(s) for just these runs, built from the stored files like `labkit report`."""
    from labkit import report

    data, measures = _measures(done, results)
    _, specs = report.load_spec(report.spec_path(data.root))
    boots = {rid: report.boot_of(doc) for rid, doc in data.docs.items()}  # the unit of interval rows
    return report.build_tables(measures, specs, only=["measured"], boots=boots)


def figures(done: LaneRun, results: str | Path | None = None) -> dict[str, Any]:
    """The bench notebook's plots for these runs, from the stored files: measures as bars, prefill by
    prompt length, and the first run's tokens over time."""
    from labkit import report as plots

    data, measures = _measures(done, results)
    return {
        "bars": plots.measure_bars(measures),
        "prefill": plots.prefill_by_length(measures),
        "tokens": plots.tokens_over_time(data.requests(done.run_ids[:1]), done.run_ids[0]),
    }


def save_figures(done: LaneRun, figs: dict[str, Any], out: str | Path | None = None) -> list[Path]:
    """PNG of each figure: into `out` when given, else added to the first run folder (atomically, listed in
    its run.json, never replacing a file)."""
    import io

    from labkit.store import attach_bytes

    paths = []
    for name, fig in figs.items():
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        if out is not None:
            target = Path(out) / f"{name}.png"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(buf.getvalue())
            paths.append(target)
        else:
            paths.append(attach_bytes(done.run_dirs[0], f"{name}.png", buf.getvalue()))
    return paths


def attach_executed_notebook(done: LaneRun) -> Path | None:
    """Copy the notebook papermill is writing into the first run folder (plain `papermill in out` runs).

    `labkit run` copies the finished notebook itself; under a bare papermill CLI the kernel finds the output
    path on its parent's command line. The copy holds every cell up to the one calling this.
    """
    from labkit.store import attach_file

    if not done.run_dirs or settings.current().batch:
        return None
    out = _papermill_output()
    if out is None or not out.is_file():
        return None
    return attach_file(done.run_dirs[0], out, "bench.ipynb")


def _papermill_output() -> Path | None:
    try:
        ppid = os.getppid()
        argv = Path(f"/proc/{ppid}/cmdline").read_bytes().split(b"\0")
        cwd = Path(os.readlink(f"/proc/{ppid}/cwd"))
    except OSError:
        return None
    args = [a.decode(errors="replace") for a in argv if a]
    return papermill_output_path(args, cwd)


# papermill CLI options that take values (2 for name + value), to find the positional input/output paths.
_PM_TAKES = {
    "-p": 2,
    "--parameters": 2,
    "-r": 2,
    "--parameters_raw": 2,
    "-f": 1,
    "--parameters_file": 1,
    "-y": 1,
    "--parameters_yaml": 1,
    "-b": 1,
    "--parameters_base64": 1,
    "-k": 1,
    "--kernel": 1,
    "-l": 1,
    "--language": 1,
    "--cwd": 1,
    "--engine": 1,
    "--start-timeout": 1,
    "--execution-timeout": 1,
    "--log-level": 1,
    "--request-save-on-cell-execute": 0,
}


def papermill_output_path(args: list[str], cwd: Path) -> Path | None:
    """The output notebook path of a papermill command line (None for stdout or not papermill)."""
    start = next((i for i, a in enumerate(args) if Path(a).name == "papermill"), None)
    if start is None:
        return None
    positional, i = [], start + 1
    while i < len(args):
        a = args[i]
        if a.startswith("-") and a != "-":
            i += 1 + _PM_TAKES.get(a.split("=", 1)[0], 0) if "=" not in a else 1
            continue
        positional.append(a)
        i += 1
    if len(positional) < 2 or positional[1] == "-":
        return None
    out = Path(positional[1])
    return out if out.is_absolute() else cwd / out
