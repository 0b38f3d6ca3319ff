"""Helpers for the simulator tests: start `python -m labkit.sim` in a subprocess, and a plain http.client client.

The server is started with --port 0 and its port is read from its own log line, so tests never race for ports.
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

READY = re.compile(r"(?:Starting vLLM server on|Uvicorn running on) http://[^:]+:(\d+)")


class SimProc:
    """A simulator subprocess; collects its stderr lines; always stopped by the fixture that made it."""

    def __init__(self, args: list[str]):
        self.args = [sys.executable, "-m", "labkit.sim", "--port", "0", *args]
        self.proc = subprocess.Popen(self.args, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.port: int | None = None
        self._up = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        started = False
        for line in self.proc.stderr:  # type: ignore[union-attr]
            self.lines.append(line.rstrip("\n"))
            m = READY.search(line)
            if m:
                self.port = int(m.group(1))
            started = started or "Application startup complete" in line
            if started and self.port:  # SGLang prints the address after the startup line
                self._up.set()
        self._up.set()

    def wait_up(self, timeout: float = 20.0) -> int:
        """Wait for the 'Application startup complete.' line; returns the port."""
        assert self._up.wait(timeout), f"sim did not come up: {self.lines}"
        assert self.port, f"sim exited during boot (rc={self.proc.poll()}): {self.lines}"
        return self.port

    def wait_line(self, text: str, timeout: float = 10.0) -> str:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for line in list(self.lines):
                if text in line:
                    return line
            time.sleep(0.01)
        raise AssertionError(f"no line containing {text!r} in {self.lines}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)


def request(port: int, method: str, path: str, body: dict | None = None, conn: http.client.HTTPConnection | None = None,
            timeout: float = 30.0) -> tuple[int, bytes]:
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(body).encode() if body is not None else None
    c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
    r = c.getresponse()
    out = r.status, r.read()
    if conn is None:
        c.close()
    return out


def get_json(port: int, path: str) -> dict:
    status, body = request(port, "GET", path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def post_json(port: int, path: str, body: dict) -> tuple[int, dict]:
    status, raw = request(port, "POST", path, body)
    return status, json.loads(raw) if raw else {}


def metrics(port: int) -> dict[str, float]:
    """`name{labels}` -> value; `_created` samples dropped."""
    status, body = request(port, "GET", "/metrics")
    assert status == 200
    out = {}
    for line in body.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if "_created" in key.split("{")[0]:
            continue
        out[key] = float(value)
    return out


def metric_sum(m: dict[str, float], name: str) -> float:
    """Sum of a metric over all its label sets."""
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


@dataclass
class Stream:
    status: int
    t0: float
    events: list[tuple[float, object]] = field(default_factory=list)  # (arrival, parsed JSON or "[DONE]")
    raw: bytes = b""

    @property
    def token_events(self) -> list[tuple[float, dict]]:
        out = []
        for t, e in self.events:
            if isinstance(e, dict) and e.get("choices"):
                ch = e["choices"][0]
                text = ch.get("delta", {}).get("content") if "delta" in ch else ch.get("text")
                if text or ch.get("finish_reason"):
                    out.append((t, e))
        return out

    @property
    def usage(self) -> dict | None:
        for _, e in self.events:
            if isinstance(e, dict) and e.get("choices") == [] and "usage" in e:
                return e["usage"]
        return None

    @property
    def done(self) -> bool:
        return any(e == "[DONE]" for _, e in self.events)


def stream(port: int, path: str, body: dict, timeout: float = 30.0, conn: http.client.HTTPConnection | None = None,
           max_events: int | None = None) -> Stream:
    """POST a streaming request; stamp every SSE event on arrival (perf_counter) before parsing it."""
    c = conn or http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = json.dumps(dict(body, stream=True)).encode()
    t0 = time.perf_counter()
    c.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    s = Stream(r.status, t0)
    if r.status != 200:
        s.raw = r.read()
        return s
    while True:
        line = r.readline()
        t = time.perf_counter()
        if not line:
            break
        if line.startswith(b"data: "):
            payload = line[6:].strip()
            s.events.append((t, "[DONE]" if payload == b"[DONE]" else json.loads(payload)))
            if payload == b"[DONE]":
                assert r.read().strip() == b""  # the blank line and terminating chunk; leaves the keep-alive connection reusable
                break
            if max_events and len(s.events) >= max_events:
                break
    if conn is None and max_events is None:
        c.close()
    return s


def chat(content: str, n: int, **extra) -> dict:
    """A chat body forcing exactly n output tokens, the way labkit's harness must."""
    return dict({"model": "sim-test", "messages": [{"role": "user", "content": content}], "max_tokens": n,
                 "min_tokens": n, "ignore_eos": True}, **extra)
