"""Node ops `write` (atomically replace a small file in the view) and `check` (broken links before
launch), and the entry point that dispatches OP REQUEST_JSON to an op (`probe` and `hash`: probe.py,
`build`: build.py); last in the joined script."""

from __future__ import annotations

import json
import os
import sys

from labkit.stage.node.base import PARTIAL_PREFIX, Fail, absolute, bare_name, emit, fsync_dir
from labkit.stage.node.build import build
from labkit.stage.node.probe import hash_files, probe


def write(req: dict) -> dict:
    dst = absolute(req["dst"], "view path")
    name = bare_name(req["name"])
    path = os.path.join(dst, name)
    tmp = os.path.join(dst, PARTIAL_PREFIX + name)
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(req["text"])
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(dst)
    return {"path": path}


# --------------------------------------------------------------------------------------------------
# check: broken links before launch


def check(req: dict) -> dict:
    dst = absolute(req["dst"], "view path")
    if not os.path.isdir(dst):
        raise Fail(f"view {dst} does not exist")
    broken, total = [], 0
    for name in sorted(os.listdir(dst)):
        path = os.path.join(dst, name)
        if os.path.islink(path):
            total += 1
            if not os.path.exists(path):
                broken.append({"name": name, "target": os.readlink(path)})
    return {
        "links": total,
        "broken": broken,
        "partials": [n for n in os.listdir(dst) if n.startswith(PARTIAL_PREFIX)],
    }


OPS = {"probe": probe, "hash": hash_files, "build": build, "write": write, "check": check}


def main(argv: list) -> int:
    if len(argv) != 3 or argv[1] not in OPS:
        emit(
            "error",
            message=f"usage: python3 -I -S -c SCRIPT {{{'|'.join(OPS)}}} REQUEST_JSON (got {argv[1:]!r})",
        )
        return 2
    try:
        data = OPS[argv[1]](json.loads(argv[2]))
    except Fail as e:
        emit("error", message=str(e))
        return 2
    except OSError as e:
        emit("error", message=f"{e.filename or ''}: {e.strerror or e}".lstrip(": "))
        return 2
    emit("result", data=data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
