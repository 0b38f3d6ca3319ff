"""Shared helpers for the results/report tests: real LanePlans, real store writes, temp folders only."""

from __future__ import annotations

from pathlib import Path

from labkit.measure import RequestRecord, RunSummary
from labkit.recipe import find_recipe, load_recipe
from labkit.store import ResultsStore, StoredRun
from labkit.store.files import RUN_SCHEMA_VERSION
from labkit.store.storedrun import parse_run

REPO = Path(__file__).resolve().parents[2]


def sim_plan(spec: str = "none"):
    return load_recipe(find_recipe("sim", REPO / "recipes")).resolve({"spec": spec})


def requests_for(run_id: str, n: int = 4, concurrency: int = 1, tps: float = 30.0) -> list[RequestRecord]:
    out = []
    for i in range(n):
        t_send = i * 3_000_000_000
        t_first = t_send + 200_000_000
        tokens = 64
        t_last = t_first + int((tokens - 1) / tps * 1e9)
        out.append(
            RequestRecord(
                run_id=run_id,
                lane="sim",
                phase="decode",
                concurrency=concurrency,
                turn=i,
                stream=0,
                cold=(i == 0),
                requested_tokens=tokens,
                prompt_tokens=120,
                prompt_tokens_source="usage",
                cached_tokens=0,
                output_tokens=tokens,
                output_tokens_source="final_usage",
                n_first=1,
                chunks=tokens,
                t_send=t_send,
                t_first=t_first,
                t_last=t_last,
                t_end=t_last + 1000,
                ttft_s=0.2,
                decode_tps=tps,
                finish_reason="length",
                http_status=200,
            )
        )
    return out


def make_sim_run(
    root: Path,
    measures: dict[str, float],
    spec: str = "none",
    with_requests: bool = True,
    run_id: str | None = None,
) -> Path:
    """A complete measured run of the sim lane, written through the store like the bench notebook would."""
    store = ResultsStore(root)
    with store.new_run(sim_plan(spec), run_id=run_id) as run:
        if with_requests:
            run.write_requests(requests_for(run.run_id, tps=measures.get("decode_c1", 30.0)))
        run.finish(
            RunSummary(measures=dict(measures), n_ok=4, method={"decode_c1": "final usage, t_first..t_last"}),
            boot={"kv_pool_tokens": 1000},
            provenance={"harness": "test"},
        )
    return run.path


def flagged_run(root: Path, measures: dict, flags=(), spec: str = "none") -> str:
    """A finished sim-lane run holding just these measures and evidence flags (no requests); its run id."""
    with ResultsStore(root).new_run(sim_plan(spec)) as run:
        run.finish(
            RunSummary(measures=dict(measures), n_ok=4, flags=[dict(f) for f in flags]),
            boot={},
            provenance={"harness": "test"},
        )
    return run.run_id


def first_table(results: Path, spec_text: str, folder: Path):
    """The first table the tables.toml text `spec_text` (written into `folder`) builds from `results`."""
    from labkit import report
    from labkit.store import load_results

    spec_file = folder / "tables.toml"
    spec_file.write_text(spec_text)
    _, specs = report.load_spec(spec_file)
    return report.stored_tables(load_results(results), specs)[0]


def stored_run(doc: dict, folder: Path = Path("/nowhere/results/sim/spec-none")) -> StoredRun:
    """A run.json dict (schema version filled in) as the store reads it back: for the pure gate, table and
    resume tests, which build their runs by hand."""
    full = {"schema_version": RUN_SCHEMA_VERSION, **doc}
    return parse_run(full, folder / str(full["run_id"]))
