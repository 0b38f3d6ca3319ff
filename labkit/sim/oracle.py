"""The simulator as a measurement oracle: launch it with settings on a port of a given range, read its truth.

A thin layer over labkit.sim.process.SimProcess (which reads the port from the server's own log line and stops
the process on exit), adding `--set` settings from a dict, a port from the caller's range (retried on a bind
collision, so another process on that port can never be mistaken for ours) and GET /sim/requests.

    with SimOracle(sets={"decode_tps": 500}, ports=(18210, 18239)) as sim:
        run_bench(sim.url, ...); truth = sim.truth()
"""

from __future__ import annotations

import json
import socket
import urllib.request

from labkit.errors import LabkitError
from labkit.sim.process import SimProcess


def free_port(low: int, high: int, skip: set[int] | None = None) -> int:
    """A port in [low, high] nobody listens on right now."""
    for port in range(low, high + 1):
        if skip and port in skip:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise LabkitError(f"no free port in {low}-{high}")


class SimOracle:
    """A running simulator with known settings; `url`, `port`, `truth()`."""

    def __init__(
        self,
        preset: str | None = "test",
        sets: dict | None = None,
        ports: tuple[int, int] = (18200, 18299),
        boot_timeout: float = 30.0,
    ):
        self.args: list[str] = ["--preset", preset] if preset else []
        for key, value in (sets or {}).items():
            text = json.dumps(value) if isinstance(value, list | bool) else str(value)
            self.args += ["--set", f"{key}={text}"]
        self.ports, self.boot_timeout = ports, boot_timeout
        self.proc: SimProcess | None = None

    @property
    def url(self) -> str:
        assert self.proc is not None and self.proc.url, "simulator not started"
        return self.proc.url

    @property
    def port(self) -> int:
        assert self.proc is not None and self.proc.port, "simulator not started"
        return self.proc.port

    def __enter__(self) -> SimOracle:
        tried: set[int] = set()
        for _ in range(5):
            port = free_port(*self.ports, skip=tried)
            tried.add(port)
            proc = SimProcess([*self.args, "--port", str(port)])
            try:
                proc.wait_up(self.boot_timeout)
            except LabkitError as e:
                proc.stop()
                if "cannot listen" in "\n".join(proc.lines):
                    continue  # someone took the port between the probe and the bind: next one
                raise LabkitError(f"simulator failed to start: {e}")
            self.proc = proc
            return self
        raise LabkitError(f"simulator could not bind a port in {self.ports[0]}-{self.ports[1]}")

    def truth(self) -> dict:
        """The simulator's ground truth: GET /sim/requests."""
        with urllib.request.urlopen(self.url + "/sim/requests", timeout=30) as r:
            return json.loads(r.read())

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.stop()
