"""The llama-cpp-python server quirks labkit must handle, asserted on a real server with the tiny model.

Each test pins one fact from docs/tinymodel.md ("llama-cpp-python server quirks") and docs/engines.md that labkit's engine adapter, client or
formulas rely on; if a llama-cpp-python release changes one, this file says which.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from labkit import tinymodel
from labkit.measure.request.client import StreamClient, StreamRequest
from labkit.tinymodel.spec import EOS_ID
from tests.support.llamacpp import (
    LOG_KV,
    LOG_N_CTX,
    LOG_READY,
    chat_body,
    count_tokens,
    filler_text,
    get,
    have_llama_cpp,
    post,
    start_server,
    stream,
)

pytestmark = pytest.mark.skipif(
    not have_llama_cpp(),
    reason="llama_cpp is not importable: install the 'llamacpp' extra (pip install -e '.[llamacpp]')",
)
N_CTX = 16384


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tinymodel.ensure("tiny-llama", root=tmp_path_factory.mktemp("models"), log=None)


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    srv = start_server(model, tmp_path_factory.mktemp("logs"), n_ctx=N_CTX)
    yield srv
    srv.stop()


def test_boot_log_facts_are_in_stderr(server):
    err = server.stderr_text()
    assert [int(m) for m in LOG_N_CTX.findall(err)][:1] == [N_CTX]
    kv = LOG_KV.search(err)
    assert kv is not None and int(kv.group(2)) == N_CTX and float(kv.group(1)) > 0
    ready = LOG_READY.search(err)
    assert ready is not None and ready.group(1) == f"http://127.0.0.1:{server.port}"
    assert err.index(kv.group(0)) < err.index(ready.group(0))  # weights and KV before the HTTP server binds


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_streams_carry_no_usage_and_one_token_per_chunk(server, api):
    n = 64
    body = {
        "model": "tiny",
        "max_tokens": n,
        "temperature": 0.8,
        "seed": 3,
        "stream_options": {"include_usage": True},
    }
    body |= (
        {"messages": [{"role": "user", "content": "Tell me about sorting."}]}
        if api == "chat"
        else {"prompt": "Sorting is"}
    )
    res = stream(server.port, body, api=api)
    assert res.status == 200 and res.done and not res.error
    assert not any(ev.get("usage") for ev in res.events), "llama-cpp-python started sending usage in streams"
    assert res.n == n and res.finish_reason == "length"
    assert all(t.isascii() and t for t in res.texts)
    if api == "chat":  # a role-only prelude before the first token (TTFR is not TTFT)
        assert res.events[0]["choices"][0]["delta"] == {"role": "assistant"}
    # The same request non-streamed reports usage, and it agrees with the chunk count.
    status, data = post(
        server.port,
        "/v1/chat/completions" if api == "chat" else "/v1/completions",
        {k: v for k, v in body.items() if k != "stream_options"},
    )
    assert status == 200 and data["usage"]["completion_tokens"] == n


def test_concurrent_requests_are_serialised_not_truncated(server):
    n = 128
    results = [None, None]

    def run(i):
        results[i] = stream(server.port, chat_body(f"[{i}{time.time_ns()}] Write about lists.", n))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    a, b = sorted(results, key=lambda r: r.t_first)
    assert a.n == b.n == n and a.finish_reason == b.finish_reason == "length"  # --interrupt_requests False
    assert b.t_first > a.t_last  # no overlap window: c2 is two c1 requests in a row
    # Headers come at once even for the queued request: time to first byte is not TTFT.
    assert b.t_hdr - b.t_send < (b.t_first - b.t_send) / 2


def test_overlong_streamed_prompt_is_an_empty_200(server):
    prompt = "[overlong] " + filler_text()[:80_000]
    assert count_tokens(server.port, prompt) > N_CTX
    res = stream(server.port, chat_body(prompt, 16), keep_raw=True)
    assert res.status == 200 and res.raw == b"" and not res.done and res.n == 0 and not res.events
    status, data = post(server.port, "/v1/chat/completions", chat_body(prompt, 16))
    assert status == 400 and data["error"]["code"] == "context_length_exceeded"
    assert get(server.port, "/v1/models")[0] == 200  # the server survives it


def test_unique_first_marker_prevents_prefix_reuse(server):
    text = filler_text()[5000:11000]
    same = [stream(server.port, chat_body("[same] " + text, 2)) for _ in range(2)]
    fresh = stream(server.port, chat_body(f"[{time.time_ns()}] " + text, 2))
    # The repeated prompt hits the KV prefix cache (much faster); a new first marker does not.
    assert same[1].ttft < same[0].ttft / 3
    assert fresh.ttft > same[1].ttft * 3
    assert "prefix-match hit" in server.stderr_text()


def test_queued_request_gets_ping_comments(model, tmp_path):
    """A request queued > 15 s receives `: ping - <time>` SSE comments; parsers must skip them."""
    # The pings of a stream start 15 s after its response headers, which a queued request may get seconds
    # after it was sent. The busy stream is dropped at the oracle probe's second ping (30 s after its headers),
    # by when labkit's probe, sent before it, has had its first. A busy window of 4 x N_CTX tokens outlasts
    # that on a fast machine (between two busy streams a queued probe could take the model lock unpinged).
    busy_ctx = 4 * N_CTX
    srv = start_server(model, tmp_path, n_ctx=busy_ctx, extra=("--n_threads", "1"))
    pinged = threading.Event()

    def keep_busy():  # long decodes hold the model lock until the probe has seen a ping
        i = 0
        while not pinged.is_set():
            stream(srv.port, chat_body(f"[busy{i}] Say a lot.", busy_ctx - 64), timeout=120, cancel=pinged)
            i += 1

    def labkit_probe():  # labkit's own client, queued alongside: the same pings must not upset it
        async def go():
            async with StreamClient(srv.url, timeout=120) as c:
                return await c.stream(
                    StreamRequest(
                        prompt="[labkit probe] hello", max_tokens=4, model="tiny", min_tokens=4, timeout=120
                    )
                )

        got.append(asyncio.run(go()))

    got: list = []
    pings: list[str] = []

    def on_ping(line: str) -> None:
        pings.append(line)
        if len(pings) >= 2:
            pinged.set()

    busy = threading.Thread(target=keep_busy)
    lab = threading.Thread(target=labkit_probe)
    try:
        busy.start()
        time.sleep(0.5)
        lab.start()
        time.sleep(1.0)  # labkit's probe is queued first
        probe = stream(
            srv.port,
            chat_body("[probe] hello", 4),
            timeout=120,
            keep_raw=True,
            on_comment=on_ping,
        )
        pinged.set()
        busy.join(30)
        lab.join(60)
        assert probe.comments and probe.comments[0].startswith(": ping - "), probe.raw[:300]
        # The probe is served once the busy stream is dropped, and its parser got past the comment.
        assert probe.n == 4 and probe.done and probe.finish_reason == "length"
        assert probe.ttft > 30
        (res,) = got  # labkit's client waited past its own first ping and still parsed a clean stream
        assert res.ok and res.output_tokens == 4 and res.finish_reason == "length", res.error
        assert (res.t_first - res.t_hdr) / 1e9 > 15
    finally:
        pinged.set()
        srv.stop()
    assert srv.proc.returncode is not None and not busy.is_alive() and not lab.is_alive()


def test_eos_likely_model_needs_min_tokens_to_force_the_length(tmp_path):
    """The EOS-likely preset stops early unless forced; `min_tokens` (what labkit sends) forces N, and
    `ignore_eos` alone does nothing on llama-cpp-python."""
    model = tinymodel.ensure("tiny-llama-eos", root=tmp_path / "models", log=None)
    srv = start_server(model, tmp_path / "logs", n_ctx=2048)
    try:
        n = 48
        plain = [stream(srv.port, chat_body(f"[{i}] hi", n, seed=i, temperature=0.8)) for i in range(5)]
        assert all(r.finish_reason == "stop" for r in plain) and max(r.n for r in plain) < n
        ignored = stream(srv.port, chat_body("[x] hi", n, seed=1, temperature=0.8, ignore_eos=True))
        assert ignored.finish_reason == "stop" and ignored.n < n
        for extra in ({"min_tokens": n}, {"logit_bias": {str(EOS_ID): -100}}):
            forced = stream(srv.port, chat_body("[y] hi", n, seed=1, temperature=0.8, **extra))
            assert forced.n == n and forced.finish_reason == "length", extra
    finally:
        srv.stop()
