"""Tables and figures of the runs a LaneRun stored, always rebuilt from the stored files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labkit.lab.runs import LaneRun


def _measures(done: LaneRun, results: str | Path | None) -> tuple[Any, Any]:
    """(stored results, their measures rows for just these runs): what tables and figures are built from."""
    from labkit.store import load_results

    data = load_results(results)
    return data, data.measures[data.measures["run"].isin(done.run_ids)]


def tables(done: LaneRun, results: str | Path | None = None) -> list[Any]:
    """The measured-lanes table(s) for just these runs, built from the stored files like `labkit report`, the
    table by prompt content when the runs measured content (docs/measurement.md, "Prompt content") and the
    table by turn when they ran agentic sessions or idle turns ("Agentic sessions", "Idle turns"), and the table
    by depth when they measured context depths ("Context depth"), and the table under load when they ran load
    levels ("Serving under load")."""
    from labkit import report
    from labkit.measures import CAPACITY, LEVEL_AXES, parse_key

    data, measures = _measures(done, results)
    _, specs = report.load_spec(report.spec_path(data.root))
    keys = [str(m) for m in measures["measure"].unique()] if len(measures) else []
    parsed = [key for k in keys if (key := parse_key(k)) is not None]
    loads = [key for key in parsed if any(name in LEVEL_AXES for name, _ in key.axes)]
    # the other tables' axes from the other keys: a session level's turns are the load table's
    axes = {name for key in parsed if key not in loads for name, _ in key.axes}
    content, turns, depths = "content" in axes, bool(axes & {"turn", "idle"}), "depth" in axes
    capacity = any(key.family in CAPACITY.values() for key in parsed)
    only = (
        ["measured"]
        + ["content"] * content
        + ["turns"] * turns
        + ["depths"] * depths
        + ["load"] * bool(loads)
    )
    only += ["capacity"] * capacity
    return report.stored_tables(data, specs, measures=measures, only=only)


def agreement(done: LaneRun, results: str | Path | None = None) -> str:
    """Per stored run, the client − engine agreement per request (TTFT and decode per concurrency, from the
    engine's own per-request metrics; docs/measurement.md, "Per-request server truth"), read back from the
    stored summaries; a line saying so when the engine gave none."""
    from labkit.measure import RunSummary, server_truth_row

    data, _ = _measures(done, results)
    lines = []
    for rid in done.run_ids:
        stored = data.docs.get(rid)
        row = server_truth_row(RunSummary.from_dict(dict(stored.summary.raw) if stored else {}))
        lines.append(
            f"{rid}: " + (f"{row[1]}: {row[2]}" if row else "no per-request metrics from the engine")
        )
    return "\n".join(lines)


def figures(done: LaneRun, results: str | Path | None = None) -> dict[str, Any]:
    """The bench notebook's plots for these runs, from the stored files: measures as bars, prefill by
    prompt length, and the first run's tokens over time; with load levels, latency against throughput and the
    first load run's TTFT per level."""
    from labkit import report as plots

    data, measures = _measures(done, results)
    figs = {
        "bars": plots.measure_bars(measures),
        "prefill": plots.prefill_by_length(measures),
        "tokens": plots.tokens_over_time(data.requests(done.run_ids[:1]), done.run_ids[0]),
    }
    from labkit.store import read_telemetry

    csvs = read_telemetry(done.run_dirs[0])
    if csvs:  # beside the tokens: what each node's GPU did in the same run
        figs["nodes"] = plots.node_series(csvs, f"{done.run_ids[0]}: node power and SM clock")
    loaded = plots.load_runs(measures)
    if loaded:  # only runs with load levels: no empty load figures beside a plain bench
        figs["latency_throughput"] = plots.latency_throughput(measures)
        figs["ttft_distribution"] = plots.ttft_distribution(
            data.requests(loaded[:1], chunks=False), f"{loaded[0]}: TTFT per load level"
        )
    return figs


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


def wide(
    results: str | Path | None = None,
    recipes: str | list[str] | None = None,
    measures: list[str] | None = None,
) -> Any:
    """Every stored run as one row of a DataFrame, its measures as columns, its variant axes and swept keys,
    source, date, image and versions beside them (Results.wide); `recipes` keeps those recipes' runs (names or
    aliases), `measures` those measures. Per-request rows: `load_results(results).requests(run_ids)`."""
    from labkit.report import as_list
    from labkit.store import load_results

    frame = load_results(results).wide(measures)
    names = as_list(recipes)
    if names:
        wanted = {n for name in names for n in (name, _stored_name(name))}
        frame = frame[frame["recipe"].isin(wanted)].reset_index(drop=True)
    return frame


def _stored_name(name: str) -> str:
    """The folder name runs of the recipe `name` (a name or an alias) are stored under; `name` when no recipe
    has it (a bare endpoint's lane, an import's)."""
    from labkit.recipe import recipe_named

    return recipe_named(name) or name
