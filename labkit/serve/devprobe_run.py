"""Running the device probe (labkit.serve.devprobe) on a lane's nodes before its engine starts: every node at
once, each answer cached on this machine per node, image (or interpreter) and driver, with its date, so a lane
probes once and later boots read the cache. A simulated lane is not probed: its truth is configured."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from labkit.errors import LabkitError
from labkit.nodes import Host, HostError
from labkit.recipe import LanePlan
from labkit.roofline import FOLDER, load_checkpoint, nominal_memory
from labkit.serve.devprobe import MATMUL, PROBE_BYTES, PROBE_CHECK, ROUNDS, SCRIPT, parse_probe, probe_command
from labkit.serve.keep import probes_dir, write_whole
from labkit.serve.plan import python_for
from labkit.serve.state import LaneState
from labkit.serve.verdict import OK, WARN, Check

PROBE_TIMEOUT = 120.0  # seconds: a `docker run` of the (pulled) image, torch's import, the reads


def probe_key(node: str, where: str, driver: str | None, fp8: bool) -> str:
    """What a cached answer holds for: the node, its image ID or interpreter, its driver, and the probe."""
    what = json.dumps([node, where, driver, fp8, SCRIPT, PROBE_BYTES, MATMUL, ROUNDS])
    return hashlib.sha256(what.encode()).hexdigest()[:24]


def _cached(path: Path, node: str) -> Check | None:
    try:
        facts = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    facts["cached"] = str(path)
    if not facts.get("tool"):  # the interpreter has neither torch nor numpy: that stays so until it changes
        return Check(node, PROBE_CHECK, WARN, f"not measured: {facts.get('why')} (cached)", facts=facts)
    return Check(
        node, PROBE_CHECK, OK, f"{facts.get('device')} (probed {facts.get('date')}, cached)", facts=facts
    )


def fp8_weights(plan: LanePlan) -> bool:
    """Whether the checkpoint facts beside the recipe show FP8 weights (then the prefill kernels are FP8)."""
    try:
        ck = load_checkpoint(Path(plan.file).parent / FOLDER)
    except LabkitError:
        return False
    return ck is not None and any(t.dtype.startswith("F8_E4M3") for t in ck.digest.tensors)


def with_nominal(check: Check, device: str | None) -> Check:
    """The device's nominal read bandwidth beside the probe's figure, when labkit knows the device."""
    nominal = nominal_memory(str(check.facts.get("device") or "")) or nominal_memory(device)
    if nominal is not None:
        check.facts["nominal_read_bytes_per_s"] = nominal.bytes_per_s
        check.facts["nominal_source"] = nominal.source
    return check


def probe_devices(lane: LaneState, images: dict[str, dict], state: dict[str, dict]) -> list[Check]:
    """The probe check of every node (`images` and `state`: the pre-boot checks' facts by node, for the
    cache key); never a refusal."""
    plan = lane.plan
    if plan.simulated or plan.engine.kind == "sim":
        return []
    python = python_for(plan, lane.group.hosts)
    folder = probes_dir()
    fp8 = plan.engine.runtime == "docker" and fp8_weights(plan)  # a process lane here runs on a CPU

    def one(h: Host) -> Check:
        where = str((images.get(h.name) or {}).get("id") or python)
        path = folder / f"{probe_key(h.name, where, (state.get(h.name) or {}).get('driver'), fp8)}.json"
        hit = _cached(path, h.name)
        if hit is not None:
            return with_nominal(hit, plan.cluster.device)
        lane.say(f"probing memory bandwidth and matmul on {h.name} (once per node, image and driver)")
        r = h.run(probe_command(plan, python, fp8), timeout=PROBE_TIMEOUT)
        check = parse_probe(h.name, r, dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
        lane.say(f"  {h.name}: {check.result}")
        if check.status == OK or ("why" in check.facts and not check.facts.get("tool")):
            write_whole(path, json.dumps(check.facts, indent=1))
        return with_nominal(check, plan.cluster.device)

    out = []
    for node, (check, err) in lane.group.begin(one).outcomes().items():
        if check is None:
            why = err.message if isinstance(err, HostError) else f"{type(err).__name__}: {err}"
            check = Check(node, PROBE_CHECK, WARN, f"not measured: {why}")
        out.append(check)
    return out
