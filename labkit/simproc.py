"""Run the simulator (`python -m labkit.sim`) as a child process for tests and accuracy benchmarks.

A real HTTP server in its own process, so the client under test shares nothing with it but the socket and the
monotonic clock. The context manager always stops the child (SIGTERM, then SIGKILL) — no orphans.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from labkit.errors import LabkitError


def free_port(low: int, high: int) -> int:
    """A port in [low, high] nobody listens on right now."""
    for port in range(low, high + 1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise LabkitError(f"no free port in {low}-{high}")


class SimProcess:
    """`with SimProcess(preset="test", sets={"decode_tps": 500}, port=18210) as sim: sim.url`"""

    def __init__(self, preset: str | None = "test", sets: dict | None = None, port: int = 0,
                 boot_timeout: float = 30.0, ports: tuple[int, int] = (18200, 18299)):
        self.preset, self.sets, self.boot_timeout = preset, dict(sets or {}), boot_timeout
        self.port = port or free_port(*ports)
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> SimProcess:
        argv = [sys.executable, "-m", "labkit.sim", "--port", str(self.port)]
        if self.preset:
            argv += ["--preset", self.preset]
        for key, value in self.sets.items():
            text = json.dumps(value) if isinstance(value, list | bool) else str(value)
            argv += ["--set", f"{key}={text}"]
        fd, name = tempfile.mkstemp(prefix="labkit-sim-", suffix=".log")
        self.log_path = Path(name)
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        self.proc = subprocess.Popen(argv, stdout=fd, stderr=fd, env=env, start_new_session=True)
        os.close(fd)
        deadline = time.monotonic() + self.boot_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LabkitError(f"simulator exited during boot ({self.proc.returncode}): {self.log()[-600:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                pass
            time.sleep(0.05)
        self.__exit__(None, None, None)
        raise LabkitError(f"simulator on {self.url} not ready after {self.boot_timeout} s")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def truth(self) -> dict:
        """The simulator's ground truth: GET /sim/requests."""
        with urllib.request.urlopen(self.url + "/sim/requests", timeout=10) as r:
            return json.loads(r.read())

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.log_path is not None:
            self.log_path.unlink(missing_ok=True)
