"""In step mode a token reaches its HTTP handler one task hop after the engine loop stamps the step; the truth's
emission times (t_first, t_last, emissions) must be the handler's writes, as the per-request schedule's are and
as GET /sim/requests documents, or a busy event loop between the two reads as client lateness.

The server runs in this process, on a thread of its own, so the test can plant a block of its event loop in
that hop; the client reads from the test's thread.
"""

from __future__ import annotations

import asyncio
import selectors
import threading
import time

import pytest

from labkit.sim import steps as steps_mod
from labkit.sim.boot import SimBootLog
from labkit.sim.config import build_config
from labkit.sim.connection import HttpConn
from labkit.sim.routes import App
from tests.support.sim import chat, get_json, stream

pytestmark = pytest.mark.alone  # a client read against the truth in ms (tests/support/workers.py)

HOP = 0.04  # the planted block between the engine loop's stamp and the handler's write, seconds


@pytest.fixture
def blocked_hop(monkeypatch):
    """Every request's first emission is handed over HOP late: the event loop is blocked after the engine
    loop stamped the step and before the handler can write it."""
    real_add = steps_mod.StepLoop.add

    def add(self, rec):
        queue = real_add(self, rec)
        put = queue.put_nowait

        def late(em):
            if em is not None and em.first:
                time.sleep(HOP)
            put(em)

        queue.put_nowait = late
        return queue

    monkeypatch.setattr(steps_mod.StepLoop, "add", add)


@pytest.fixture
def step_server():
    """A step-mode simulator served on a thread of this process; yields its port."""
    cfg = build_config("test", sets=["max_num_batched_tokens=2048", "record_chunks=true"])
    loop = asyncio.SelectorEventLoop(selectors.SelectSelector())
    app = App(cfg, SimBootLog(cfg))
    server = loop.run_until_complete(loop.create_server(lambda: HttpConn(app), "127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        server.close()
        pending = asyncio.all_tasks(loop)  # the engine loop, asleep for work
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()


def test_the_truths_send_times_are_the_handlers_writes(blocked_hop, step_server):
    s = stream(step_server, "/v1/chat/completions", chat("one two three", 8))
    assert s.status == 200 and s.done
    (truth,) = get_json(step_server, "/sim/requests")["requests"]
    first_read = s.token_events[0][0]
    # the client read the first token after the write; the truth says it was sent then, not HOP earlier
    assert 0 <= first_read - truth["t_first"] < HOP / 2
    assert truth["emissions"][0][1] == truth["t_first"] and truth["emissions"][-1][1] == truth["t_last"]
    # the block is the server's own lateness, and the truth shows it
    assert truth["max_lateness"] >= HOP
    assert [t for t, _, _ in truth["emissions"]] == sorted(t for t, _, _ in truth["emissions"])
