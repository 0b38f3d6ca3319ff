"""Node-to-node fan-out of staging copies (docs/fanout.md, "Protocol"): `serve` offers this node's copies of
named files over HTTP on one address, even while they are being written; `pull` fetches files from the first
source that works, renaming each into place only after its SHA-256 checked against a digest no peer gave.
STANDALONE, stdlib only, its own op, apart from the node script (script.py):
`python3 -I -S -c SCRIPT {serve|pull} -`, the request JSON on stdin (so no token is on an argv); JSON lines
out like the node script's, one "result" or "error" last. A server exits at `lifetime` s whatever happens
(SIGALRM's default action), so none outlives its controller.

SCRIPT is the parts, then this file, joined by the controller (labkit/stage/peer_ops.py, PARTS): the parts
are split by meaning (what both sides share, the run's temp files, the server, the puller) and import each
other only by names the joined text defines earlier.

Test-only faults, off unless the request names them: serve's "flip": {name: offset} inverts that byte in all
it sends of the file, as a fault on the wire would; pull's "rate" caps its reads of a file source (bytes/s).
"""

from __future__ import annotations

import json
import sys

from labkit.stage.node.peer_pull import pull
from labkit.stage.node.peer_serve import serve
from labkit.stage.node.peer_wire import Fail, clean, emit


def main(argv: list) -> int:
    ops = {"serve": serve, "pull": pull}
    if len(argv) != 3 or argv[1] not in ops or argv[2] != "-":
        emit("error", message=f"usage: peer.py {{serve|pull}} - (request JSON on stdin), got {argv[1:]!r}")
        return 2
    try:
        emit("result", data=ops[argv[1]](json.loads(sys.stdin.read())))
    except (Fail, OSError) as e:
        why = f"{e.filename or ''}: {e.strerror or e}".lstrip(": ") if isinstance(e, OSError) else str(e)
        emit("error", message=clean(why, 2000))
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
