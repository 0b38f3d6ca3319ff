"""Talking to the fan-out's node script (docs/fanout.md, "Protocol"): the script's parts joined into the one
text a node runs, the quoted command line, and one op run on one host with its events streamed.

The node side is split by meaning into stdlib-only modules (`node/peer_wire.py`, `node/peer_serve.py`,
`node/peer_temp.py`, `node/peer_pull.py`, then `node/peer.py`, in the order of PARTS). A node has nothing of
labkit, so the parts are sent as one text: each part as it reads, less its `from __future__` line and its
imports of the other parts (which are the same names, defined earlier in the text). What a node runs is those
files; tests/stage/test_peer_script.py checks that no part rebinds a name another defines.

Every text that reaches the controller from a peer op passes through `printable`: a peer's header or reason
phrase ends up in events, results and errors, and it must not put terminal escapes on the operator's screen.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from pathlib import Path

from labkit.errors import LabkitError
from labkit.nodes import CommandTimeout
from labkit.stage.transport import EventSink, HostLike, parse_node_output

PEER_DIR = Path(__file__).parent / "node"
# The files of the peer script in the order they are sent: each part defines the names the later ones import.
PARTS = ("peer_wire", "peer_temp", "peer_serve", "peer_pull", "peer")


def peer_parts() -> list[Path]:
    """The files of the peer script, in the order they are sent."""
    return [PEER_DIR / f"{name}.py" for name in PARTS]


def shippable(text: str) -> str:
    """One part's text less its `from __future__` line and its `from labkit...` imports (one line, or a
    parenthesised block to its closing line): plain text lines, so joining needs no parser (and no lock)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if skipping:
            skipping = not line.startswith(")")
        elif line.startswith("from __future__ ") or line.startswith("from labkit."):
            skipping = line.rstrip().endswith("(")
        else:
            out.append(line)
    return "".join(out)


def peer_script(marks: Iterable[str] = ()) -> str:
    """The text a node runs: the marks as comment lines, then every part (read from this checkout)."""
    body = "\n".join(shippable(p.read_text(encoding="utf-8")) for p in peer_parts())
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
