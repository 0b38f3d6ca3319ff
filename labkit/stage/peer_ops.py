"""Talking to the fan-out's node script (docs/fanout.md, "Protocol"): the script's parts joined into the one
text a node runs, the quoted command line, and one op run on one host with its events streamed.

The node side is split by meaning into stdlib-only modules (`node/peer_wire.py`, `node/peer_serve.py`,
`node/peer_pull.py`, then `node/peer.py`, which lists them in PARTS). A node has nothing of labkit, so the
parts are sent as one text: each part as it reads, less its `from __future__` line and its imports of the
other parts (which are the same names, defined earlier in the text). What a node runs is those files.

Every text that reaches the controller from a peer op passes through `printable`: a peer's header or reason
phrase ends up in events, results and errors, and it must not put terminal escapes on the operator's screen.
"""

from __future__ import annotations

import ast
import json
import shlex
import threading
from collections.abc import Iterable
from pathlib import Path

from labkit.errors import LabkitError
from labkit.nodes import CommandTimeout
from labkit.stage.transport import EventSink, HostLike, parse_node_output

PEER_DIR = Path(__file__).parent / "node"
PEER_SCRIPT = PEER_DIR / "peer.py"  # the entry part: main() and the list of the parts before it
# ast.parse is not safe in two threads at once (CPython's recursion-depth check, seen here), and fan_out
# starts servers in threads: the text is joined under this lock, once per change of the files.
_JOINED: dict[tuple, str] = {}
_JOINING = threading.Lock()


def peer_parts() -> list[Path]:
    """The files of the peer script, in the order they are sent."""
    tree = ast.parse(PEER_SCRIPT.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "PARTS" for t in node.targets):
            return [PEER_DIR / f"{name}.py" for name in ast.literal_eval(node.value)] + [PEER_SCRIPT]
    raise LabkitError(f"{PEER_SCRIPT} has no PARTS tuple")


def _shippable(path: Path, seen: dict[str, Path]) -> str:
    """One part's text less its `from __future__` import and its imports of labkit (the other parts); a
    top-level name another part defines already is an error (the joined text would rebind it)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, str(path))
    drop: set[int] = set()
    for node in tree.body:
        module = node.module if isinstance(node, ast.ImportFrom) and node.level == 0 else None
        if module is not None and (module == "__future__" or module.startswith("labkit.")):
            drop.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
            continue
        for name in _defines(node):
            if seen.setdefault(name, path) != path:
                raise LabkitError(f"{path.name} and {seen[name].name} both define {name}")
    lines = text.splitlines(keepends=True)
    return "".join(line for i, line in enumerate(lines, 1) if i not in drop)


def _defines(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def peer_script(marks: Iterable[str] = ()) -> str:
    """The text a node runs: the marks as comment lines, then every part (read from this checkout)."""
    with _JOINING:
        key = tuple(
            (p.name, p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(PEER_DIR.glob("peer*.py"))
        )
        if key not in _JOINED:
            seen: dict[str, Path] = {}
            _JOINED.clear()
            _JOINED[key] = "\n".join(_shippable(p, seen) for p in peer_parts())
        body = _JOINED[key]
    return "".join(f"# {m}\n" for m in marks) + "from __future__ import annotations\n\n" + body


def peer_command(op: str, marks: Iterable[str] = ()) -> str:
    """`python3 -I -S -c SCRIPT OP -`, quoted; the marks go in comment lines at the top of the script."""
    return shlex.join(["python3", "-I", "-S", "-c", peer_script(marks), op, "-"])


def printable(text: str, limit: int = 400) -> str:
    """`text` with every character that is not printable (control codes, escapes, bidi marks) written as a
    Python escape, cut to `limit` characters."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))
    return out if len(out) <= limit else out[:limit] + "..."


def printable_tree(value: object) -> object:
    """`value` (decoded JSON) with `printable` applied to every string in it, keys included."""
    if isinstance(value, str):
        return printable(value, 2000)
    if isinstance(value, dict):
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_tree(v) for v in value]
    return value


def run_peer(
    host: HostLike,
    op: str,
    request: dict,
    *,
    marks: Iterable[str] = (),
    timeout: float | None = None,
    on_event: EventSink | None = None,
) -> dict:
    """One peer op on `host`, the request on stdin; events reach on_event as they come; the result. Every
    string in events, the result and an error's message is made `printable`."""
    cmd, stdin, what = peer_command(op, marks), json.dumps(request), f"fan-out {op}"

    def on_line(line: str) -> None:
        if on_event is None or not line.startswith("{"):
            return
        try:
            ev = json.loads(line)
        except ValueError:
            return
        if isinstance(ev, dict) and ev.get("event") not in ("result", "error"):
            on_event(printable_tree(ev))  # type: ignore[arg-type]  # a dict stays a dict

    streaming = getattr(host, "run_streaming", None)
    try:
        if streaming is not None:
            r = streaming(cmd, timeout=timeout, stdin=stdin, on_line=on_line)
            got = parse_node_output(host.name, what, r.stdout, r.stderr, r.exit_code)
        else:
            r = host.run(cmd, timeout=timeout, stdin=stdin)
            sink = None if on_event is None else lambda ev: on_event(printable_tree(ev))  # type: ignore[arg-type]
            got = parse_node_output(host.name, what, r.stdout, r.stderr, r.exit_code, sink)
    except CommandTimeout:
        raise LabkitError(f"{host.name}: {what} timed out after {timeout:g} s and was ended")
    except LabkitError as e:
        raise LabkitError(printable(str(e), 2000)) from None
    return printable_tree(got)  # type: ignore[return-value]  # a dict stays a dict
