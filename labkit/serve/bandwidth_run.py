"""Running `labkit doctor --bandwidth` (labkit.serve.bandwidth) on a lane's nodes: which tools each node has, then
ib_write_bw from the head to each other node in turn (server and client started together, the client retrying
until the server listens) and all_reduce_perf on the head over the lane's nodes. Every command has a timeout;
nothing here runs without the flag. docs/bandwidth.md, "How doctor runs them". The figure the roofline's
fabric term uses is kept for the lane's nodes (docs/roofline.md, "Parallelism and the fabric").
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from labkit.errors import LabkitError
from labkit.nodes import Host, HostError, Result
from labkit.recipe import LanePlan
from labkit.serve.bandwidth import (
    ALL_REDUCE,
    IB_WRITE_BW,
    IMAGE,
    MPIRUN,
    NODE,
    SECONDS,
    Measured,
    absent,
    all_reduce_argv,
    ib_client_command,
    ib_server_command,
    measured,
    parse_which,
    quoted,
    which_command,
)
from labkit.serve.fabric import detect_command, fabric_env, parse_address
from labkit.serve.keep import probes_dir, write_whole
from labkit.serve.runtimes import DockerRuntime
from labkit.serve.state import LaneState

WHICH_TIMEOUT = 30.0
IB_TIMEOUT = SECONDS * 2 + 30.0  # both directions' run plus the client's retries
ALL_REDUCE_TIMEOUT = 600.0  # 8 MB to 1 GB in 8 sizes, each with warm-up iterations


def _run(host: Host, command: str, timeout: float) -> Result | str:
    try:
        return host.run(command, timeout=timeout)
    except HostError as e:
        return str(e)


def fabric_address(lane: LaneState, host: Host) -> str:
    """The node's fabric address (the recipe's, else detected on its interface), or its management address."""
    fabric = lane.plan.cluster.fabric
    if fabric is None:
        return host.address
    given = fabric.address(host.name)
    if given:
        return given
    r = _run(host, detect_command(fabric.interface_of(host.name)), WHICH_TIMEOUT)
    if isinstance(r, str):
        return host.address
    try:
        return parse_address(host.name, fabric.interface_of(host.name), r.stdout, r.stderr, r.ok)
    except LabkitError:
        return host.address


def image_prefix(lane: LaneState) -> tuple[str, ...] | None:
    """`docker run --rm ... IMAGE` of a docker lane (its tools run as its engine would), else None."""
    runtime, image = lane.runtime, lane.plan.engine.image
    if isinstance(runtime, DockerRuntime) and image:
        return tuple(runtime.tool_prefix(image))
    return None


def tools_on(lane: LaneState) -> dict[str, dict[str, str] | str]:
    """{node: {tool: where it is}, or why the node could not be asked}, all nodes at once; a docker lane's
    image is asked on every node too (each node's copy of it)."""
    prefix = image_prefix(lane)
    command = which_command(list(prefix) if prefix else None)
    out: dict[str, dict[str, str] | str] = {}
    for node, (r, err) in lane.group.begin(lambda h: _run(h, command, WHICH_TIMEOUT)).outcomes().items():
        if r is None:
            out[node] = str(err)
        else:
            out[node] = r if isinstance(r, str) else parse_which(r.stdout)
    return out


def _outcome(pair: str, tool: str, r: Result | str, where: str = "") -> Measured:
    if isinstance(r, str):
        return measured(pair, tool, False, "", r, where)
    return measured(pair, tool, r.ok, r.stdout, r.stderr, where)


def _prefix(lane: LaneState, place: str) -> tuple[str, ...]:
    return (image_prefix(lane) or ()) if place == IMAGE else ()


def ib_pair(lane: LaneState, a: Host, b: Host, hca: str, places: tuple[str, str] = (NODE, NODE)) -> Measured:
    """ib_write_bw with the server on `b` and the client on `a`, started together, each where it has the tool."""
    pair = f"{a.name}-{b.name}"
    where = places[0] if places[0] == places[1] else f"{a.name}: {places[0]}, {b.name}: {places[1]}"
    address = fabric_address(lane, b)
    server_cmd = ib_server_command(hca, limit=int(IB_TIMEOUT) - 5, prefix=_prefix(lane, places[1]))
    server = lane.group.begin(lambda h: _run(h, server_cmd, IB_TIMEOUT), [b])
    client = _run(a, ib_client_command(hca, address, prefix=_prefix(lane, places[0])), IB_TIMEOUT)
    got = _outcome(pair, IB_WRITE_BW, client, where)
    r, err = server.outcomes()[b.name]
    served = _outcome(pair, IB_WRITE_BW, r if r is not None else str(err))
    if got.figure is None and served.line.startswith("failed: "):
        line = f"failed: server on {b.name}: {served.line[8:]}"
        return Measured(pair, IB_WRITE_BW, None, got.unit, line, where)
    return got


def rank_env(plan: LanePlan, names: list[str]) -> tuple[dict[str, str], str | None]:
    """The fabric env and interface every node shares, for mpirun's `-x` and `--mca ..._if_include`, which give
    each rank the same value: a variable whose value differs per node (per-node interfaces) is left out, so
    each rank keeps its own default rather than the head's."""
    per_node = [fabric_env(plan, n) for n in names]
    env = (
        {k: v for k, v in per_node[0].items() if all(e.get(k) == v for e in per_node[1:])} if per_node else {}
    )
    fabric = plan.cluster.fabric
    ifaces = {fabric.interface_of(n) for n in names} if fabric is not None else set()
    return env, ifaces.pop() if len(ifaces) == 1 else None


def measure_bandwidth(lane: LaneState) -> list[Measured]:
    """Head to every other node with ib_write_bw (on the lane's first HCA), then all_reduce_perf over the lane;
    each tool from the node's PATH, else from the lane's image (docs/bandwidth.md, "Absent tools, and tools in
    the image")."""
    head, others = lane.group.head, [h for h in lane.group if h.name != lane.group.head.name]
    found = tools_on(lane)
    unasked = {n: why for n, why in found.items() if isinstance(why, str)}
    have = {n: t for n, t in found.items() if not isinstance(t, str)}
    image = lane.plan.engine.image if image_prefix(lane) else None
    out: list[Measured] = []
    fabric = lane.plan.cluster.fabric
    hca = fabric.hcas[0] if fabric is not None and fabric.hcas else None
    for b in others:
        pair = f"{head.name}-{b.name}"
        asked = [n for n in (head.name, b.name) if n in unasked]
        if asked:
            out.append(Measured(pair, IB_WRITE_BW, None, "", f"failed: {asked[0]}: {unasked[asked[0]]}"))
            continue
        missing = [n for n in (head.name, b.name) if IB_WRITE_BW not in have[n]]
        if missing:
            out.append(absent(pair, IB_WRITE_BW, missing, image))
        elif hca is None:
            out.append(
                Measured(pair, IB_WRITE_BW, None, "", "not run: the recipe gives no [cluster.fabric] hcas")
            )
        else:
            out.append(ib_pair(lane, head, b, hca, (have[head.name][IB_WRITE_BW], have[b.name][IB_WRITE_BW])))
    return [*out, all_reduce(lane, have, unasked, image)]


def all_reduce(
    lane: LaneState, have: dict[str, dict[str, str]], unasked: dict[str, str], image: str | None
) -> Measured:
    """all_reduce_perf over the lane: on one node from its PATH or the image; across nodes under the head's own
    mpirun, which starts the ranks on the nodes themselves, so each node needs the tool on its PATH."""
    head, names = lane.group.head, lane.group.names
    pair = "-".join(names)
    if head.name in unasked:
        return Measured(pair, ALL_REDUCE, None, "", f"failed: {head.name}: {unasked[head.name]}")
    if len(names) == 1:
        place = have[head.name].get(ALL_REDUCE)
        if place is None:
            return absent(pair, ALL_REDUCE, names, image)
        argv = all_reduce_argv([], False)
        return _outcome(
            pair, ALL_REDUCE, _run(head, quoted([*_prefix(lane, place), *argv]), ALL_REDUCE_TIMEOUT), place
        )
    missing = [n for n in names if n in have and have[n].get(ALL_REDUCE) != NODE]
    if missing:
        in_image = [n for n in missing if have[n].get(ALL_REDUCE) == IMAGE]
        if in_image and len(in_image) == len(missing):
            return Measured(
                pair,
                ALL_REDUCE,
                None,
                "",
                f"not run: all_reduce_perf is only in {image} on "
                f"{', '.join(in_image)}; mpirun starts ranks on the nodes themselves (docs/bandwidth.md)",
            )
        return absent(pair, ALL_REDUCE, missing)
    if have[head.name].get(MPIRUN) != NODE:
        return absent(pair, MPIRUN, [head.name])
    hosts = [fabric_address(lane, h) for h in lane.group]
    env, iface = rank_env(lane.plan, names)
    r = _run(head, quoted(all_reduce_argv(hosts, True, env, iface)), ALL_REDUCE_TIMEOUT)
    return _outcome(pair, ALL_REDUCE, r, NODE)


def fabric_file(plan: LanePlan) -> Path:
    """Where the lane's nodes' last measured fabric figure is kept (beside the device probes' answers)."""
    key = hashlib.sha256(json.dumps(sorted(plan.cluster.nodes)).encode()).hexdigest()[:16]
    return probes_dir() / f"fabric-{key}.json"


def store_fabric(plan: LanePlan, found: list[Measured]) -> dict | None:
    """The fabric bandwidth the roofline's collective term uses, kept with its date for the lane's nodes:
    all_reduce_perf's bus bandwidth when it ran (the ring's own rate per GPU), else the slowest ib_write_bw
    pair. None (and nothing kept) when no tool gave a figure."""
    bus = [(m.figure, m.pair) for m in found if m.tool == ALL_REDUCE and m.figure is not None]
    pairs = [(m.figure, m.pair) for m in found if m.tool == IB_WRITE_BW and m.figure is not None]
    if bus:
        rate, how = bus[0][0] * 1e9, f"all_reduce_perf bus bandwidth over {bus[0][1]}"  # GB/s
    elif pairs:
        figure, pair = min(pairs)
        rate, how = figure * 1e9 / 8, f"ib_write_bw, the slowest pair ({pair})"  # Gb/s
    else:
        return None
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    doc = {
        "bytes_per_s": rate,
        "source": f"{rate / 1e9:,.1f} GB/s measured by labkit doctor --bandwidth {when}: {how}",
    }
    write_whole(fabric_file(plan), json.dumps(doc, indent=1))
    return doc


def stored_fabric(plan: LanePlan) -> dict | None:
    """The lane's nodes' kept fabric figure ({bytes_per_s, source}), None when none was measured."""
    try:
        doc = json.loads(fabric_file(plan).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("bytes_per_s") else None
