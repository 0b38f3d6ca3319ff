"""The requests of the fan-out's node ops (pure, no I/O): what each node's server offers and to whom, and what
each node pulls from where (docs/fanout.md, "Protocol" and "Trust"), so they can be checked without a node.

Every (source, receiver, file) has a token of its own (`token_keys`; the executor draws them): a token sent
to a source that is not the real one (an impostor on a freed port) opens nothing anywhere else. A server lets
connect only the addresses of the receivers that may pull from it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from labkit.stage.fanout import NAS, FanoutFile, FanoutPlan
from labkit.stage.node.script import PARTIAL_PREFIX

TokenKey = tuple[str, str, str]  # (source node, receiving node, file)


def partial_name(name: str, run: str) -> str:
    """The temp name of `name` in the view during fan-out run `run` (a partial copy to the probe); `run` is
    8 hex digits (labkit/stage/node/peer_temp.py tells a crashed run's leftovers by them)."""
    return f"{PARTIAL_PREFIX}{name}.{run}"


def token_keys(plan: FanoutPlan) -> Iterator[TokenKey]:
    """Every (source, receiver, file) a pull may ask for: each receiver from each node in its source list."""
    for c in plan.chains:
        for r in c.receivers:
            for s in c.sources(r):
                if s is not None:
                    yield (s, r, c.file.name)


def pullers(plan: FanoutPlan, node: str) -> dict[str, list[str]]:
    """{file: receivers that may pull it from `node`} (its next receiver, and any later one as a fallback)."""
    out: dict[str, list[str]] = {}
    for c in plan.chains:
        who = [r for r in c.receivers if node in c.sources(r)]
        if who:
            out.setdefault(c.file.name, []).extend(who)
    return out


def serve_request(
    plan: FanoutPlan, node: str, dst: str, *, run: str, tokens: Mapping[TokenKey, str], bind: str,
    binds: Mapping[str, str], lifetime: float, idle: float, stall: float, head: float = 10.0,
    rate: float | None = None, flip: Mapping[str, int] | None = None,
) -> dict | None:  # fmt: skip
    """The `serve` request of `node` (None when it serves nothing): its own copies, growing or whole, each
    with its receivers' tokens; `allow`: those receivers' addresses (`binds`)."""
    files, may = [], pullers(plan, node)
    for c in plan.chains:
        if c.file.name not in may:
            continue
        name, who = c.file.name, may[c.file.name]
        keyed = {tokens[(node, r, name)]: r for r in who}
        if c.head == node:
            files.append({"name": name, "size": c.file.size, "path": f"{dst}/{name}", "tokens": keyed})
        else:
            path = f"{dst}/{partial_name(name, run)}"
            adopt = (
                c.file.sha256 is not None
            )  # a crashed run's bytes are taken only when a digest checks them
            files.append(
                {"name": name, "size": c.file.size, "path": path, "final": f"{dst}/{name}", "tokens": keyed}
                | {"adopt": adopt}
            )
    if not files:
        return None
    allow = sorted({binds[r] for who in may.values() for r in who})
    request = {
        "bind": bind,
        "allow": allow,
        "files": files,
        "expect": plan.serving(node),
        "lifetime": lifetime,
    }
    conns = 2 * sum(map(len, may.values())) + 4  # every receiver's pull of every file, a retry each, spare
    request.update(idle=idle, stall=stall, head=head, conns=conns, rate=rate or 0)
    request.update(flip=dict(flip or {}))
    return request


def nas_source(f: FanoutFile, nas: Mapping[str, object] | None = None) -> dict:
    """A read of `f` from the shared cache: its snapshot entry, or through `nas` ({"address", "port",
    "token"} or {..., "tokens": {file: token}}: an HTTP stand-in for the NAS, as the benchmark and tests use
    to throttle and count reads; a peer server takes a token for one file only)."""
    if nas:
        source = {"kind": "peer", "label": NAS, **nas}
        per_file = source.pop("tokens", None)
        if isinstance(per_file, Mapping):
            source["token"] = per_file[f.name]
        return source
    return {"kind": "file", "label": NAS, "path": f.src}


def pull_request(
    plan: FanoutPlan, node: str, dst: str, *, run: str, tokens: Mapping[TokenKey, str], bind: str,
    endpoints: Mapping[str, tuple[str, int]], stall: float, floor: float = 0.0, window: float = 30.0,
    nas: Mapping[str, object] | None = None,
) -> dict | None:  # fmt: skip
    """The `pull` request of `node` (None when it receives nothing); its connections come from `bind`. Peers
    absent from `endpoints` (their server did not start) are left out of the sources."""
    files = []
    for c in plan.receiving(node):
        sources = []
        for s in c.sources(node):
            if s is None:
                sources.append(nas_source(c.file, nas))
            elif s in endpoints:
                address, port = endpoints[s]
                token = tokens[(s, node, c.file.name)]
                sources.append({"kind": "peer", "label": s, "address": address, "port": port, "token": token})
        entry = {"name": c.file.name, "size": c.file.size, "partial": partial_name(c.file.name, run)}
        entry.update(sha256=c.file.sha256, digest_of=c.file.trust, blob=c.file.src, sources=sources)
        files.append(entry)
    if not files:
        return None
    return {"dst": dst, "bind": bind, "stall": stall, "floor": floor, "window": window, "files": files}
