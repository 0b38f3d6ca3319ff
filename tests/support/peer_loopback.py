"""The fan-out's node script run on this machine as a node runs it (the joined text, `python3 -I -S -c`), each
"node" on a loopback address of its own (all of 127.0.0.0/8 is loopback on Linux), and a fake peer that speaks
just enough HTTP to be an impostor, a trickle, or a liar (docs/fanout.md, "Trust").
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable

from labkit.stage.peer_ops import peer_script

# A server node, two receiving nodes and an address no request allows (apart from the sshd nodes' .2-.5).
A, B, C, OUTSIDER = "127.0.0.21", "127.0.0.22", "127.0.0.23", "127.0.0.29"


class LocalPeer:
    """One peer op as a child process; its JSON lines collected as they come."""

    def __init__(self, op: str, request: dict):
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", peer_script(), op, "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request))
        self.proc.stdin.close()
        self.events: list[dict] = []
        self.raw: list[str] = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self.cond:
                self.raw.append(line)
                self.events.append(json.loads(line))
                self.cond.notify_all()

    def wait_for(self, pred: Callable[[dict], bool], timeout: float = 30) -> dict:
        """The first event for which pred holds (waiting for it)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                hit = next((ev for ev in self.events if pred(ev)), None)
                if hit is not None:
                    return hit
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.reader.is_alive()):
                    raise AssertionError(f"no such event within {timeout} s: {self.events}")
                self.cond.wait(min(left, 0.2))

    def finish(self, timeout: float = 60) -> tuple[dict | None, str | None]:
        """(result data, error message): one of them is None."""
        self.proc.wait(timeout)
        self.reader.join(5)
        for ev in self.events:
            if ev["event"] == "result":
                return ev["data"], None
            if ev["event"] == "error":
                return None, ev["message"]
        assert self.proc.stderr is not None
        raise AssertionError(
            f"exit {self.proc.returncode} without a result: {self.proc.stderr.read()[-2000:]}"
        )

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def serving(request: dict) -> tuple[LocalPeer, tuple[str, int]]:
    """A server started and listening: (the process, its (address, port))."""
    peer = LocalPeer("serve", request)
    ev = peer.wait_for(lambda ev: ev["event"] in ("listening", "error"))
    if ev["event"] == "error":
        peer.stop()
        raise AssertionError(f"the server did not start: {ev['message']}")
    return peer, (ev["address"], ev["port"])


def pulling(request: dict, timeout: float = 120) -> tuple[dict | None, str | None, LocalPeer]:
    peer = LocalPeer("pull", request)
    data, error = peer.finish(timeout)
    return data, error, peer


def connect(endpoint: tuple[str, int], source: str, timeout: float = 10) -> socket.socket:
    """A TCP connection to endpoint from the loopback address `source`."""
    return socket.create_connection(endpoint, timeout=timeout, source_address=(source, 0))


def closed_by_peer(sock: socket.socket, within: float) -> bool:
    """True when the other end closes (or resets) the connection within `within` s without sending."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def ask(endpoint, source: str, path: str, token: str | None, range_from: int | None = None) -> int:
    """The status of one GET from `source` (the body is not read)."""
    import http.client

    conn = http.client.HTTPConnection(*endpoint, timeout=10, source_address=(source, 0))
    headers = {"X-Labkit-Token": token} if token else {}
    if range_from is not None:
        headers["Range"] = f"bytes={range_from}-"
    try:
        conn.request("GET", path, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def head(status: str, size: int, length: int, extra: str = "") -> bytes:
    return (f"HTTP/1.0 {status}\r\nX-Labkit-Size: {size}\r\nContent-Length: {length}\r\n{extra}\r\n").encode(
        "latin-1"
    )


class FakePeer:
    """A TCP server on (address, port) that reads one request head per connection, keeps it in `heads`, and
    sends what `reply(head)` yields, `pace` seconds apart, then closes."""

    def __init__(
        self,
        address: str,
        reply: Callable[[bytes], Iterable[bytes]],
        port: int = 0,
        pace: float = 0.0,
    ):
        self.reply, self.pace, self.heads, self.stopping = reply, pace, [], False
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.endpoint = (address, self.sock.getsockname()[1])
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        data = b""
        try:
            conn.settimeout(10)
            while b"\r\n\r\n" not in data:
                more = conn.recv(4096)
                if not more:
                    return
                data += more
            self.heads.append(data)
            for chunk in self.reply(data):
                if self.stopping:
                    return
                conn.sendall(chunk)
                time.sleep(self.pace)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stopping = True
        self.sock.close()

    def token_sent(self) -> str:
        """The X-Labkit-Token of the first request it got."""
        for line in self.heads[0].decode("latin-1").split("\r\n"):
            if line.lower().startswith("x-labkit-token:"):
                return line.split(":", 1)[1].strip()
        raise AssertionError(f"no token in {self.heads[0]!r}")
