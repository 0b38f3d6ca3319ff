"""Running `labkit doctor --bandwidth` (labkit.serve.bandwidth) on a lane's nodes: which tools each node has, then
ib_write_bw from the head to each other node in turn (server and client started together, the client retrying
until the server listens) and all_reduce_perf on the head over the lane's nodes. Every command has a timeout;
nothing here runs without the flag. docs/bandwidth.md, "How doctor runs them".
"""

from __future__ import annotations

from labkit.errors import LabkitError
from labkit.nodes import Host, HostError, Result
from labkit.recipe import LanePlan
from labkit.serve.bandwidth import (
    ALL_REDUCE,
    IB_WRITE_BW,
    MPIRUN,
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


def tools_on(lane: LaneState) -> dict[str, set[str] | str]:
    """{node: the tools on its PATH, or why it could not be asked}, all nodes at once."""
    out: dict[str, set[str] | str] = {}
    outcomes = lane.group.begin(lambda h: _run(h, which_command(), WHICH_TIMEOUT)).outcomes()
    for node, (r, err) in outcomes.items():
        if r is None:
            out[node] = str(err)
        else:
            out[node] = r if isinstance(r, str) else parse_which(r.stdout)
    return out


def _outcome(pair: str, tool: str, r: Result | str) -> Measured:
    if isinstance(r, str):
        return measured(pair, tool, False, "", r)
    return measured(pair, tool, r.ok, r.stdout, r.stderr)


def ib_pair(lane: LaneState, a: Host, b: Host, hca: str) -> Measured:
    """ib_write_bw with the server on `b` and the client on `a`, started together."""
    pair = f"{a.name}-{b.name}"
    address = fabric_address(lane, b)
    server = lane.group.begin(
        lambda h: _run(h, ib_server_command(hca, limit=int(IB_TIMEOUT) - 5), IB_TIMEOUT), [b]
    )
    client = _run(a, ib_client_command(hca, address), IB_TIMEOUT)
    got = _outcome(pair, IB_WRITE_BW, client)
    r, err = server.outcomes()[b.name]
    served = _outcome(pair, IB_WRITE_BW, r if r is not None else str(err))
    if got.figure is None and served.line.startswith("failed: "):
        return Measured(pair, IB_WRITE_BW, None, got.unit, f"failed: server on {b.name}: {served.line[8:]}")
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
    """Head to every other node with ib_write_bw (on the lane's first HCA), then all_reduce_perf over the lane."""
    head, others = lane.group.head, [h for h in lane.group if h.name != lane.group.head.name]
    found = tools_on(lane)
    unasked = {n: why for n, why in found.items() if isinstance(why, str)}
    have = {n: t for n, t in found.items() if not isinstance(t, str)}
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
            out.append(absent(pair, IB_WRITE_BW, missing))
        elif hca is None:
            out.append(
                Measured(pair, IB_WRITE_BW, None, "", "not run: the recipe gives no [cluster.fabric] hcas")
            )
        else:
            out.append(ib_pair(lane, head, b, hca))
    names = lane.group.names
    lane_pair = "-".join(names)
    if head.name in unasked:
        return [*out, Measured(lane_pair, ALL_REDUCE, None, "", f"failed: {head.name}: {unasked[head.name]}")]
    missing = [n for n in names if n in have and ALL_REDUCE not in have[n]]
    if missing:
        return [*out, absent(lane_pair, ALL_REDUCE, missing)]
    mpirun = MPIRUN in have[head.name]
    if not mpirun and len(names) > 1:
        return [*out, absent(lane_pair, MPIRUN, [head.name])]
    hosts = [fabric_address(lane, h) for h in lane.group] if mpirun else []
    env, iface = rank_env(lane.plan, names)
    argv = all_reduce_argv(hosts, mpirun, env, iface)
    r = _run(head, quoted(argv), ALL_REDUCE_TIMEOUT)
    return [*out, _outcome(lane_pair, ALL_REDUCE, r)]
