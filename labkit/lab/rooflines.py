"""The lane's roofline (docs/roofline.md): before a boot, what `labkit show` prints (bytes per decode step and
the ceiling, from the checkpoint facts beside the recipe, its parallelism and speculation, at the nominal
bandwidth of its `cluster.device` or its newest run's probe); after a run, that run's ceilings at its own
probed bandwidth and τ, which the stored summary keeps beside each decode and prefill figure."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError
from labkit.lab.resolve import spec_k
from labkit.measures import measure_key
from labkit.recipe import LanePlan
from labkit.roofline import (
    FOLDER,
    NOMINAL_FABRIC,
    NOMINAL_MEMORY,
    Checkpoint,
    Parallel,
    Rate,
    StepInputs,
    cases,
    ceiling,
    decode_step,
    load_checkpoint,
    nominal_memory,
    prefill_cost,
    read_folder,
    table,
)

# bytes per KV element by the engine's --kv-cache-dtype ("auto": the model's, taken as 2)
KV_DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


def checkpoint_of(plan: LanePlan) -> Checkpoint | None:
    """The checkpoint facts beside the plan's recipe, None when it has none."""
    kv = plan.engine.arg("--kv-cache-dtype")
    width = KV_DTYPE_BYTES.get(str(kv[0]).lower()) if kv else None
    return load_checkpoint(Path(plan.file).parent / FOLDER, width)


def spec_method(plan: LanePlan) -> str | None:
    """The speculative method the recipe names (vLLM's --speculative-config method, SGLang's algorithm)."""
    cfg = plan.engine.arg("--speculative-config")
    if cfg:
        try:
            return str(json.loads(cfg[0]).get("method"))
        except (ValueError, AttributeError):
            return None
    algo = plan.engine.arg("--speculative-algorithm")
    return str(algo[0]) if algo else None


def roofline(plan: LanePlan, results: str | Path | None = None, data: Any = None) -> str:
    """What `labkit show` prints under the plan: the roofline table, or why there is none. Before any run at
    the nominal bandwidth of the lane's device and τ up to K + 1; once the lane has a measured run (in
    `results`, or the loaded `data`), at its newest run's probed bandwidth and measured τ."""
    ck = checkpoint_of(plan) or _local_model(plan)
    if ck is None:
        return (
            f"roofline: no {FOLDER}/ beside {plan.file} (its config.json and header digest: docs/roofline.md)"
        )
    boot, tau = _newest_run(plan, results, data)
    bw = _bandwidth(plan, boot)
    if bw is None:
        known = ", ".join(NOMINAL_MEMORY)
        return (
            f"roofline: no bandwidth for cluster.device = {plan.cluster.device!r} in {plan.file} (known: "
            f"{known}) and no measured run of this lane with a device probe"
        )
    par = replica(plan)
    fabric = fabric_rate(plan)
    shown = cases(plan.measure.decode.concurrency, spec_k(plan), spec_method(plan), tau)
    return table(ck, par, shown, plan.measure.decode.output_tokens, Rate(*bw), fabric)


def fabric_rate(plan: LanePlan) -> Rate | None:
    """The fabric's bandwidth for a multi-node lane: the figure `labkit doctor --bandwidth` last measured
    between its nodes, else the nominal one; None on one node."""
    from labkit.serve import stored_fabric

    if len(plan.cluster.nodes) < 2:
        return None
    kept = stored_fabric(plan)
    return Rate(float(kept["bytes_per_s"]), str(kept["source"])) if kept else NOMINAL_FABRIC


def replica(plan: LanePlan) -> Parallel:
    """The GPUs one copy of the model spans (tp x pp): a step's reads spread over them; data-parallel
    replicas and `replicas` lanes each decode their own sequences."""
    p = plan.engine.parallel
    return Parallel(p.tp, p.ep, p.tp * p.pp)


def _newest_run(plan: LanePlan, results: str | Path | None, data: Any) -> tuple[dict[str, Any], float | None]:
    """The boot facts and measured τ of the lane's newest measured run ({} and None without one)."""
    from labkit.lab.timing import STORED, lane_runs
    from labkit.store import load_results

    data = load_results(results) if data is None else data
    runs = sorted(lane_runs(data, plan, STORED), key=lambda d: d.run_id)
    if not runs:
        return {}, None
    tau = runs[-1].summary.measures.get("accept_length")
    return dict(runs[-1].boot.raw), float(tau) if isinstance(tau, int | float) else None


@dataclass(frozen=True)
class RunRoofline:
    """One run's ceilings in tokens/s: decode by concurrency (c1's per request, cN's aggregate) and prefill by
    prompt length, with the bandwidth and compute they used and where those come from. `shares` gives each
    measured figure as a percentage of its ceiling, under its catalogue key."""

    model: str
    bandwidth: float
    bandwidth_source: str
    decode: dict[int, float]
    compute: float | None = None
    compute_source: str = ""
    prefill: dict[int, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    fabric_source: str = ""

    def shares(self, measures: Mapping[str, Any]) -> dict[str, float]:
        """The ceilings and, for each figure the run measured, its share: decode_c1_roofline,
        decode_c<N>_agg_roofline, prefill_<P>_compute (%), beside decode_c1_ceiling and the like (t/s)."""
        out: dict[str, float] = {}
        rows = [
            (
                "decode_c1" if n == 1 else "decode_c<N>_agg",
                {} if n == 1 else {"concurrency": n},
                "roofline",
                c,
            )
            for n, c in self.decode.items()
        ]
        rows += [("prefill_<P>", {"prompt": p}, "compute", c) for p, c in self.prefill.items()]
        for family, axes, kind, top in rows:
            figure = measures.get(measure_key(family, **axes))
            out[measure_key(f"{family}_ceiling", **axes)] = top
            if isinstance(figure, int | float):
                out[measure_key(f"{family}_{kind}", **axes)] = 100.0 * figure / top
        return out

    def method(self, key: str) -> str:
        """How a roofline measure was made (the summary's method column)."""
        if key.startswith("prefill_"):
            return f"compute ceiling from {self.model}, at {self.compute_source}"
        return f"memory roofline from {self.model}, at {self.bandwidth_source}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _context(records: Sequence[Any], output: int) -> int:
    """The decode turns' mean context: the median prompt of the c1 decode requests plus half the answer."""
    prompts = sorted(
        r.prompt_tokens
        for r in records
        if r.phase == "decode" and r.concurrency == 1 and r.ok and r.prompt_tokens
    )
    return (prompts[len(prompts) // 2] if prompts else 0) + output // 2


def _slowest(boot: Mapping[str, Any], figure: str) -> tuple[float, str, dict] | None:
    """(value, node, facts) of the node whose device probe gave the lowest `figure`: it sets the step."""
    probed = [
        (float(f[figure]), node, f)
        for node, f in (boot.get("probe") or {}).items()
        if isinstance(f, dict) and f.get(figure)
    ]
    return min(probed, key=lambda x: x[0]) if probed else None


def _bandwidth(plan: LanePlan, boot: Mapping[str, Any]) -> tuple[float, str] | None:
    """The slowest node's probed read bandwidth, else the device's nominal figure."""
    slowest = _slowest(boot, "read_bytes_per_s")
    if slowest is not None:
        bw, node, f = slowest
        return (
            bw,
            f"{bw / 1e9:,.1f} GB/s probed on {node} {f.get('date', '')} ({f.get('tool')}, {f.get('kind')})",
        )
    nominal = nominal_memory(plan.cluster.device)
    return (nominal.bytes_per_s, nominal.source) if nominal else None


def _local_model(plan: LanePlan) -> Checkpoint | None:
    """The checkpoint facts of a lane whose model folder is on this machine (a labkit-built model, where its
    build lies), from the folder's own headers and config.json."""
    from labkit import tinymodel

    plan = tinymodel.materialize(plan, log=None, build=False)
    path = Path(plan.model.path) if plan.model.path and plan.cluster.is_local else None
    if path is None or not (path / "config.json").is_file() or not list(path.glob("*.safetensors")):
        return None
    return Checkpoint.of(
        read_folder(path, f"the headers of {path}"), json.loads((path / "config.json").read_text()), path
    )


def _simulated(plan: LanePlan) -> RunRoofline | None:
    """A simulated lane's ceilings from its configured stand-ins (sim roofline_bytes_per_token and
    memory_bandwidth): b streams read (1 + batch_beta (b - 1)) times a stream's bytes per step."""
    from labkit.sim import config_from_args

    try:
        cfg = config_from_args([a for flag, values in plan.engine.args for a in (flag, *values)])
    except (LabkitError, argparse.ArgumentError) as e:
        raise LabkitError(f"{plan.file}: the simulator's settings do not read: {e}")
    if not cfg.roofline_bytes_per_token:
        return None
    one = cfg.memory_bandwidth / cfg.roofline_bytes_per_token
    beta = min(cfg.batch_beta, 1.0)
    decode = {n: n * one / (1 + beta * (n - 1)) for n in plan.measure.decode.concurrency}
    return RunRoofline(
        f"the simulator's roofline_bytes_per_token ({cfg.roofline_bytes_per_token:,.0f} B)",
        cfg.memory_bandwidth,
        f"{cfg.memory_bandwidth / 1e9:,.1f} GB/s (the simulator's memory_bandwidth)",
        decode,
    )


def run_roofline(
    plan: LanePlan, boot: Mapping[str, Any], measures: Mapping[str, Any], records: Sequence[Any]
) -> RunRoofline | None:
    """The ceilings of one measured run, None when the lane has no checkpoint facts or no bandwidth."""
    if plan.simulated or plan.engine.kind == "sim":
        return _simulated(plan)
    ck = checkpoint_of(plan) or _local_model(plan)
    bw = _bandwidth(plan, boot)
    if ck is None or bw is None:
        return None
    par = replica(plan)
    gpus = par.gpus
    fabric = fabric_rate(plan)
    k = spec_k(plan) or int(measures.get("accept_k") or 0) or None  # the recipe's K, else the engine's
    tau = measures.get("accept_length") if k else None
    notes = [] if not k or tau else [f"τ not measured: the bound K + 1 = {k + 1} used"]
    context = _context(records, plan.measure.decode.output_tokens)
    decode = {}
    for case in cases(plan.measure.decode.concurrency, k, spec_method(plan), float(tau) if tau else None)[
        len(plan.measure.decode.concurrency) if k else 0 :
    ]:
        inputs = StepInputs(case.sequences, case.positions, context, case.draft_passes)
        step = decode_step(ck.placed, ck.shape, inputs)
        c = ceiling(step, ck.shape, par, bw[0], fabric.bytes_per_s if fabric else None, case.tau)
        decode[case.sequences] = c.tps
    compute, compute_source, prefill = None, "", {}
    flops = _slowest(boot, "matmul_flops_per_s")
    if flops is not None:
        slowest, node, f = flops
        compute = slowest * gpus
        compute_source = (
            f"{compute / 1e12:,.2f} TFLOP/s ({gpus} x the {f.get('matmul_dtype')} matmul probed on {node})"
        )
        for p in plan.measure.prefill.prompt_tokens:
            cost = prefill_cost(ck.placed, ck.shape, p, ck.config)
            prefill[p] = compute / cost.flops
    return RunRoofline(
        ck.digest.source,
        bw[0],
        bw[1],
        decode,
        compute,
        compute_source,
        prefill,
        tuple(notes),
        fabric.source if fabric else "one node: no fabric",
    )


def measured_roofline(plan: LanePlan, boot: Mapping[str, Any], result: Any) -> RunRoofline | None:
    """run_roofline for a run about to be stored; a roofline that cannot be made (a digest or config that does
    not read) becomes a note in the run's summary, never a lost run."""
    try:
        return run_roofline(plan, boot, result.summary.measures, result.records)
    except Exception as e:  # noqa: BLE001 - whatever went wrong, the measured run is stored
        result.summary.notes.append(f"roofline not computed: {type(e).__name__}: {e}")
        return None
