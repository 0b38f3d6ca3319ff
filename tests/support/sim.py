"""Helpers for the simulator tests: start `python -m labkit.sim` in a subprocess, and a plain http.client client.

Servers are started by labkit.sim.process.SimProcess (--port 0, port read from the server's own log line).
"""

from __future__ import annotations

import http.client
import json
import time
from dataclasses import dataclass, field

from labkit.errors import LabkitError
from labkit.sim.process import SimProcess


class SimProc(SimProcess):
    """labkit.sim.process.SimProcess with test-friendly assertion errors."""

    def wait_up(self, timeout: float = 20.0) -> int:
        try:
            return super().wait_up(timeout)
        except LabkitError as e:
            raise AssertionError(f"{e}\n{self.lines}")


def request(
    port: int,
    method: str,
    path: str,
    body: dict | None = None,
    conn: http.client.HTTPConnection | None = None,
    timeout: float = 30.0,
) -> tuple[int, bytes]:
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


def stream(
    port: int,
    path: str,
    body: dict,
    timeout: float = 30.0,
    conn: http.client.HTTPConnection | None = None,
    max_events: int | None = None,
) -> Stream:
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
                assert (
                    r.read().strip() == b""
                )  # the blank line and terminating chunk; leaves the keep-alive connection reusable
                break
            if max_events and len(s.events) >= max_events:
                break
    if conn is None and max_events is None:
        c.close()
    return s


def chat(content: str, n: int, **extra) -> dict:
    """A chat body forcing exactly n output tokens, the way labkit's harness must."""
    return dict(
        {
            "model": "sim-test",
            "messages": [{"role": "user", "content": content}],
            "max_tokens": n,
            "min_tokens": n,
            "ignore_eos": True,
        },
        **extra,
    )
