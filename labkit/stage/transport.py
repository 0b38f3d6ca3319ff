"""Talking to the node script: one op (probe, build, write, check) as one shell command on one node, the
JSON lines it prints parsed back, a timeout per op, and the ops of one staging call marked so that a Ctrl-C
ends them on every node (`NodeJobs`).
"""

from __future__ import annotations

import json
import shlex
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

from labkit.errors import LabkitError
from labkit.nodes import CommandTimeout

# The one script every node op runs: this file, sent as it reads (docs/staging.md, "The node script").
NODE_SCRIPT = Path(__file__).parent / "node" / "script.py"


def node_script() -> str:
    """The script every node op runs (read from this checkout each time)."""
    return NODE_SCRIPT.read_text(encoding="utf-8")


class HostLike(Protocol):
    """What staging needs from a host (labkit.nodes.Host provides it)."""

    name: str

    def run(self, cmd: Any, timeout: float | None = None, stdin: str | bytes | None = None) -> Any: ...


class TwinHost(HostLike, Protocol):
    """A host's twin (labkit.nodes' Host.twin) when it is not the host itself: a connection of its own."""

    def close(self) -> None: ...


EventSink = Callable[[dict], None]


MAX_ARG = 120_000  # Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN)
STOP_TIMEOUT = (
    20.0  # seconds for the command that ends a stage's node jobs on one node (SIGTERM, 5 s, SIGKILL)
)


class NodeJobs:
    """The node-script runs of one staging call, marked so that an interrupt can end them on their nodes.

    Closing an SSH channel (no pty) does not end the command it runs, so on Ctrl-C the controller ends them:
    every command line starts its script with the comment `# labkit-stage-job=<token>`, early in the command
    line of each process of the job (the node's login shell, `timeout`, `sh -c`, python), where `pkill -f`
    sees it. `stop(host)` sends those SIGTERM (a build removes its partial copy and exits), SIGKILL to any
    left after 5 s; from the first stop on, no further op starts (call_node refuses)."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.stopped = threading.Event()

    @property
    def mark(self) -> str:
        return f"labkit-stage-job={self.token}"

    def stop_command(self) -> str:
        """procps only; the pattern `...=[x]yz` matches the mark but not this command's own command line."""
        pattern = shlex.quote(f"labkit-stage-job=[{self.token[0]}]{self.token[1:]}")
        return (
            'command -v pkill >/dev/null || { echo "pkill not found (procps)" >&2; exit 127; }; '
            f'p={pattern}; pkill -TERM -f "$p"; n=0; '
            'while pgrep -f "$p" >/dev/null && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done; '
            'pkill -KILL -f "$p"; exit 0'
        )

    def stop(self, host: HostLike) -> None:
        """End this staging call's node jobs on `host`, over a connection of its own (the job holds the host's)."""
        self.stopped.set()
        twin = getattr(host, "twin", None)
        side = twin() if twin is not None else host
        try:
            r = side.run(self.stop_command(), timeout=STOP_TIMEOUT)
        finally:
            if side is not host:  # then it came from twin(), which getattr leaves untyped
                cast(TwinHost, side).close()
        if r.exit_code != 0:
            raise LabkitError(
                f"stopping the staging jobs failed (exit {r.exit_code}): "
                f"{(r.stderr.strip() or r.stdout.strip())[-300:]}"
            )


def node_command(op: str, request: dict, mark: str | None = None) -> str:
    """The shell line running the node script on one JSON request: `python3 -I -S -c SCRIPT OP JSON`, all quoted.

    The script travels as an argument, not on stdin: fabric/invoke feeds stdin one byte per ~10 ms, so a
    20 KB script on stdin took minutes over SSH. -I -S: the node's PYTHON* variables, user site and
    site-packages play no part (the script is stdlib only), and the interpreter starts ~3 ms sooner.
    `mark` (NodeJobs.mark) goes in a comment on the script's first line."""
    script = (f"# {mark}\n" if mark else "") + node_script()
    payload = json.dumps(request, separators=(",", ":"))
    if len(payload.encode()) > MAX_ARG:
        raise LabkitError(
            f"staging {op}: request of {len(payload)} bytes is too large for one command line "
            f"(limit {MAX_ARG}); the snapshot has too many files for this version of staging"
        )
    return shlex.join(["python3", "-I", "-S", "-c", script, op, payload])


def parse_node_output(
    node: str, op: str, stdout: str, stderr: str, exit_code: int, on_event: EventSink | None = None
) -> dict:
    """The result of one node-script run; progress lines go to on_event; failures raise LabkitError."""
    result = error = None
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        kind = ev.get("event")
        if kind == "result":
            result = ev.get("data")
        elif kind == "error":
            error = ev.get("message")
        elif on_event is not None:
            on_event(ev)
    if error is not None:
        raise LabkitError(f"{node}: staging {op}: {error}")
    if exit_code != 0 or result is None:
        detail = (stderr.strip() or stdout.strip())[-800:] or "no output"
        raise LabkitError(f"{node}: staging {op} failed (exit {exit_code}): {detail}")
    return result


@dataclass(frozen=True)
class Timeouts:
    """Seconds a node may take per node-script op; past it the op is ended there and the node is named as
    failed. Without them a node that drops off the network, or a read on a hung NFS mount, blocks staging
    (and serve) forever.

    `node`: probe (sampled blocks, ~0.5 MB per local file), write, check. Ops that read whole files (build's
    copy, full-mode hashing) get `build_floor + bytes / rate`. `rate` is set far below a healthy copy: four
    nodes sharing one NAS behind 1 GbE (~117 MB/s) would read ~30 MB/s each, and killing a slow but working
    copy of two 101.5 GB shards costs more than waiting longer on a hung one (the two shards: ~5.7 h)."""

    node: float = 120.0
    build_floor: float = 300.0
    rate: float = 10e6  # bytes/s

    def for_bytes(self, n: int, base: float | None = None) -> float:
        return (self.build_floor if base is None else base) + n / self.rate


DEFAULT_TIMEOUTS = Timeouts()


def call_node(
    host: HostLike,
    op: str,
    request: dict,
    on_event: EventSink | None = None,
    timeout: float | None = None,
    jobs: NodeJobs | None = None,
) -> dict:
    """Run one op of the node script on `host`. Progress lines stream to on_event when the host can
    stream stdout (`run_streaming`), else they arrive when the op ends. A timeout raises LabkitError
    naming the node. With `jobs`, the run is one of them (an interrupt ends it); none starts once they
    were stopped."""
    if jobs is not None and jobs.stopped.is_set():
        raise LabkitError(f"{host.name}: staging {op} not started: staging was interrupted")
    cmd = node_command(op, request, jobs.mark if jobs is not None else None)
    streaming = getattr(host, "run_streaming", None)
    try:
        if on_event is not None and streaming is not None:

            def on_line(line: str) -> None:
                if line.startswith('{"') and '"event": "progress"' in line:
                    on_event(json.loads(line))

            r = streaming(cmd, timeout=timeout, on_line=on_line)
            return parse_node_output(host.name, op, r.stdout, r.stderr, r.exit_code, None)
        r = host.run(cmd, timeout=timeout)
    except CommandTimeout:
        raise LabkitError(
            f"{host.name}: staging {op} timed out after {timeout:g} s and was ended "
            "(node unreachable, or a hung filesystem under the shared cache or the view?)"
        )
    return parse_node_output(host.name, op, r.stdout, r.stderr, r.exit_code, on_event)
