"""Start a simulator as a subprocess and wait until it serves: for tests and notebooks that need a live endpoint.

The serving layer has its own launcher for every engine; this one is the short path for code that just needs a
simulated endpoint now. It starts `python -m labkit.sim --port 0 ...`, reads the port from the server's own
log line (no free-port race), keeps every stderr line, and always stops the process (context manager).

    with SimProcess(["--preset", "test", "--set", "decode_tps=100"]) as sim:
        url = sim.url  # http://127.0.0.1:PORT
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time

from labkit.errors import LabkitError

_ADDRESS = re.compile(r"(?:Starting vLLM server on|Uvicorn running on) (http://[^:\s]+:(\d+))")


class SimProcess:
    """A running `python -m labkit.sim`; `lines` holds its stderr so far."""

    def __init__(self, args: list[str], python: str = sys.executable):
        extra = [] if "--port" in args else ["--port", "0"]
        self.args = [python, "-m", "labkit.sim", *extra, *args]
        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.port: int | None = None
        self.url: str | None = None
        self._up = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        started = False
        for line in self.proc.stderr:  # type: ignore[union-attr]
            self.lines.append(line.rstrip("\n"))
            m = _ADDRESS.search(line)
            if m:
                self.url, self.port = m.group(1), int(m.group(2))
            started = started or "Application startup complete" in line
            if started and self.port:  # SGLang prints its address after the startup line
                self._up.set()
        self._up.set()

    def wait_up(self, timeout: float = 30.0) -> int:
        """Block until the server listens; returns the port. LabkitError if it exits or times out."""
        if not self._up.wait(timeout):
            raise LabkitError(f"labkit.sim did not come up within {timeout:.0f} s: {self.args}")
        if not self.port or self.proc.poll() is not None:
            tail = "\n".join(self.lines[-5:])
            raise LabkitError(f"labkit.sim exited during boot (status {self.proc.poll()}):\n{tail}")
        return self.port

    def wait_line(self, text: str, timeout: float = 10.0) -> str:
        """The first stderr line containing `text`, waiting for it if needed."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in list(self.lines):
                if text in line:
                    return line
            time.sleep(0.01)
        raise LabkitError(f"labkit.sim printed no line containing {text!r} within {timeout:.0f} s")

    def stop(self) -> int | None:
        """Terminate (then kill) the process; returns its exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        return self.proc.returncode

    def __enter__(self) -> SimProcess:
        try:
            self.wait_up()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
