"""labkit.sim as a real HTTP server in a subprocess, driven by a plain http.client client.

Rate checks use tolerances about correctness (the configured rate comes out, not 2x off), not speed.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from tests.support.sim import SimProc, chat, get_json, metric_sum, metrics, post_json, request, stream

pytestmark = pytest.mark.alone  # timing truths within a few percent (tests/support/workers.py)


@pytest.fixture
def sim():
    """Factory: sim(*args) starts a server (waits until up unless wait=False); all stopped at teardown."""
    procs: list[SimProc] = []

    def start(*args: str, wait: bool = True) -> SimProc:
        p = SimProc(["--preset", "test", *args])
        procs.append(p)
        if wait:
            p.wait_up()
        return p

    yield start
    for p in procs:
        p.stop()


@pytest.fixture(scope="module")
def vllm():
    p = SimProc(["--preset", "test"])
    p.wait_up()
    yield p
    p.stop()


def _truth(port: int, index: int | None = None) -> dict:
    reqs = get_json(port, "/sim/requests")["requests"]
    return reqs[-1] if index is None else next(r for r in reqs if r["index"] == index)


def _listening_sockets(pid: int) -> set[str]:
    """Inodes of TCP sockets in LISTEN state held by process `pid` (from /proc, no external tools)."""
    listen = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        listen |= {r.split()[9] for r in rows if r.split()[3] == "0A"}
    mine = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    return mine & listen


# ---- boot ----------------------------------------------------------------------------------------


def test_boot_refuses_connections_until_ready(sim):
    p = sim("--set", "boot_weights_s=0.8", "--set", "boot_init_s=0.2", "--port", "0", wait=False)
    p.wait_line("Starting to load model")
    # the port is unknown until ready, so check nothing is listening for this process at all
    time.sleep(0.2)
    assert p.port is None and p.proc.poll() is None
    assert not _listening_sockets(p.proc.pid)
    port = p.wait_up()
    assert _listening_sockets(p.proc.pid)
    assert request(port, "GET", "/health")[0] == 200
    text = "\n".join(p.lines)
    # the regexes labkit's log parser uses (docs/engines.md, "vLLM boot log lines")
    assert re.search(r"vLLM (?:API )?server version ([^\s,]+)", text).group(1) == "0.33.0+labkit.sim"
    assert "simulated" in text
    assert float(re.search(r"Loading weights took ([\d.]+) seconds", text).group(1)) >= 0.8
    assert re.search(r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds", text)
    assert re.search(r"KV cache size: ([\d,]+) tokens", text).group(1) == "100,000"
    assert re.search(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", text).groups() == (
        "8,192",
        "12.21",
    )
    assert re.search(r"init engine .* took ([\d.]+) s", text)
    assert (
        re.search(r"Starting vLLM (?:API )?server (?:\d+ )?on (\S+)", text).group(1)
        == f"http://127.0.0.1:{port}"
    )
    # ordering: ready line after the KV line, startup complete last
    idx = {
        k: next(i for i, line in enumerate(p.lines) if k in line)
        for k in ("KV cache size", "init engine", "Starting vLLM server", "Application startup complete")
    }
    assert list(idx.values()) == sorted(idx.values())


def test_boot_refused_on_fixed_port(sim):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = sim("--set", "boot_weights_s=0.6", "--port", str(port), wait=False)
    p.wait_line("Starting to load model")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert p.wait_up() == port
    socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_two_line_kv_form(sim):
    p = sim("--set", "kv_log_form=two-line")
    lines = [line for line in p.lines if "KV cache size" in line or "Maximum concurrency" in line]
    assert len(lines) == 2 and lines[0].endswith("GPU KV cache size: 100,000 tokens")


def test_boot_crash_fault(sim):
    msg = (
        "Installed InstantTensor does not expose the metadata layout needed for index-aware loading "
        "(missing: _determine_buffer_size)"
    )
    p = sim("--set", f"fault_boot_crash={msg}", wait=False)
    assert p.proc.wait(10) == 1
    p.stop()
    assert any(msg in line and "ERROR" in line for line in p.lines)
    assert p.port is None and not any("Application startup complete" in line for line in p.lines)


def test_unknown_set_key_cli_error():
    r = subprocess.run(
        [sys.executable, "-m", "labkit", "sim", "--preset", "test", "--set", "decode_tsp=3"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 1
    assert "unknown sim setting 'decode_tsp'" in r.stderr and "decode_tps" in r.stderr


# ---- API shape -------------------------------------------------------------------------------------


def test_chat_stream_shape_and_usage(vllm):
    port = vllm.port
    s = stream(port, "/v1/chat/completions", chat("shape please", 7, stream_options={"include_usage": True}))
    assert s.status == 200 and s.done
    first = s.events[0][1]
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # vLLM's role prelude
    toks = s.token_events
    assert toks[-1][1]["choices"][0]["finish_reason"] == "length"
    assert all(e["choices"][0]["finish_reason"] is None for _, e in toks[:-1])
    u = s.usage
    assert u["completion_tokens"] == 7 and u["total_tokens"] == u["prompt_tokens"] + 7
    assert u["prompt_tokens_details"] == {"cached_tokens": 0}
    assert s.events[-2][1]["choices"] == [] and s.events[-1][1] == "[DONE]"
    # usage without stream_options: none; continuous without include_usage: none on vLLM
    s2 = stream(port, "/v1/chat/completions", chat("no usage", 3))
    assert s2.usage is None and all("usage" not in e for _, e in s2.events if isinstance(e, dict))
    s3 = stream(
        port, "/v1/chat/completions", chat("c only", 3, stream_options={"continuous_usage_stats": True})
    )
    assert all("usage" not in e for _, e in s3.events if isinstance(e, dict))


def test_continuous_usage_counts_tokens(vllm):
    s = stream(
        vllm.port,
        "/v1/chat/completions",
        chat("continuous", 9, stream_options={"include_usage": True, "continuous_usage_stats": True}),
    )
    counts = [e["usage"]["completion_tokens"] for _, e in s.events if isinstance(e, dict) and e["choices"]]
    assert counts[0] == 0 and counts[-1] == 9 and counts == sorted(counts)


def test_non_stream_and_completions(vllm):
    port = vllm.port
    _, body = post_json(
        port, "/v1/chat/completions", chat("capped", 5, max_completion_tokens=3, min_tokens=0)
    )
    assert body["usage"]["completion_tokens"] == 3  # max_completion_tokens wins over max_tokens
    status, body = post_json(port, "/v1/chat/completions", chat("plain", 5))
    assert status == 200 and body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] == 5 and body["choices"][0]["finish_reason"] == "length"
    assert len(body["choices"][0]["message"]["content"].split()) == 5
    status, body = post_json(
        port, "/v1/completions", {"model": "sim-test", "prompt": "a b c", "max_tokens": 4}
    )
    assert status == 200 and body["usage"] == {
        "prompt_tokens": 4,
        "total_tokens": 8,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    s = stream(
        port,
        "/v1/completions",
        {"prompt": "x y", "max_tokens": 3, "ignore_eos": True, "stream_options": {"include_usage": True}},
    )
    assert [e["object"] for _, e in s.events if isinstance(e, dict)][0] == "text_completion"
    assert s.usage["completion_tokens"] == 3


def test_tokenize_matches_usage(vllm):
    port = vllm.port
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Count: one, two, three!"},
    ]
    status, tok = post_json(port, "/tokenize", {"messages": msgs})
    assert status == 200 and tok["max_model_len"] == 8192 and len(tok["tokens"]) == tok["count"]
    _, body = post_json(port, "/v1/chat/completions", {"messages": msgs, "max_tokens": 2, "ignore_eos": True})
    assert body["usage"]["prompt_tokens"] == tok["count"] == 1 + (3 + 3) + (3 + 8) + 2
    _, tok = post_json(port, "/tokenize", {"prompt": "Count: one, two, three!"})
    _, body = post_json(port, "/v1/completions", {"prompt": "Count: one, two, three!", "max_tokens": 2})
    assert body["usage"]["prompt_tokens"] == tok["count"] == 9


def test_models_version_health_keepalive(vllm):
    port = vllm.port
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    for _ in range(3):  # one keep-alive connection
        assert request(port, "GET", "/health", conn=c)[0] == 200
    models = get_json(port, "/v1/models")
    assert models["data"][0]["id"] == "sim-test" and models["data"][0]["max_model_len"] == 8192
    v = get_json(port, "/version")
    assert v["version"] == "0.33.0+labkit.sim" and v["simulated"] is True
    assert request(port, "GET", "/nope")[0] == 404
    s = stream(port, "/v1/chat/completions", chat("on the same connection", 3), conn=c)
    assert s.done
    assert request(port, "GET", "/health", conn=c)[0] == 200
    c.close()


@pytest.mark.parametrize(
    "body,status,text",
    [
        ({"model": "other", "prompt": "x"}, 404, "does not exist"),
        ({"prompt": "x", "max_tokens": 9000}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": 4, "min_tokens": 5}, 400, "min_tokens"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream=True"),
        ({"prompt": ["a", "b"]}, 400, "batched"),
    ],
)
def test_bad_requests(vllm, body, status, text):
    got, raw = request(vllm.port, "POST", "/v1/completions", body)
    assert got == status and text in raw.decode()


def test_eos_without_ignore_eos(sim):
    p = sim("--set", "eos_mean_tokens=5")
    stops = []
    for i in range(6):
        _, body = post_json(
            p.port,
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": f"{i}"}], "max_tokens": 100},
        )
        stops.append((body["choices"][0]["finish_reason"], body["usage"]["completion_tokens"]))
    assert any(r == "stop" and n < 100 for r, n in stops)
    _, body = post_json(p.port, "/v1/chat/completions", chat("forced", 100))
    assert body["usage"]["completion_tokens"] == 100 and body["choices"][0]["finish_reason"] == "length"


# ---- known rates ---------------------------------------------------------------------------------


def _decode_tps(s) -> float:
    """Client-side (N - n_first) / (t_last - t_first) from continuous usage."""
    toks = s.token_events
    usage = [e["usage"]["completion_tokens"] for _, e in toks]
    return (usage[-1] - usage[0]) / (toks[-1][0] - toks[0][0])


def _median_tps(s) -> float:
    """1 / median inter-chunk interval: robust to a stall of the (shared, busy) test machine."""
    times = [t for t, _ in s.token_events]
    gaps = sorted(b - a for a, b in zip(times, times[1:], strict=False))
    return 1 / gaps[len(gaps) // 2]


CONT = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}


def test_decode_rate_c1_and_cold(sim):
    p = sim("--set", "cold_requests=1", "--set", "cold_decode_tps=100", "--set", "decode_tps=200")
    cold = stream(p.port, "/v1/chat/completions", chat("cold one", 41, **CONT))
    warm = stream(p.port, "/v1/chat/completions", chat("warm one", 61, **CONT))
    # tolerances tell 100 from 200 t/s on a loaded 2-core machine; they are not speed goals
    assert _decode_tps(cold) == pytest.approx(100, rel=0.2) and _median_tps(cold) == pytest.approx(
        100, rel=0.1
    )
    assert _decode_tps(warm) == pytest.approx(200, rel=0.2) and _median_tps(warm) == pytest.approx(
        200, rel=0.1
    )
    t = _truth(p.port, 2)
    assert (
        t["true_decode_tps"] == pytest.approx(200, rel=0.05) and not t["cold"] and _truth(p.port, 1)["cold"]
    )
    assert t["max_lateness"] < 0.05


def test_c2_aggregate_has_batch_effect(sim):
    import threading

    p = sim("--set", "decode_tps=200", "--set", "batch_beta=0.5")
    res = [None, None]

    def go(i):
        res[i] = stream(p.port, "/v1/chat/completions", chat(f"stream {i}", 60, **CONT))

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # steady-state window: both streams decoding
    lo = max(s.token_events[0][0] for s in res)
    hi = min(s.token_events[-1][0] for s in res)
    assert hi - lo > 0.15
    toks = sum(1 for s in res for t, _ in s.token_events if lo < t <= hi)
    agg = toks / (hi - lo)
    assert agg == pytest.approx(2 * 200 / 1.5, rel=0.2)  # 267, not 2 x c1 (400)


def test_prefill_rate_and_ttft(sim):
    p = sim("--set", "prefill_tps=10000")
    words = " ".join(f"u{i}" for i in range(2000))
    s = stream(p.port, "/v1/chat/completions", chat(words, 2, stream_options={"include_usage": True}))
    ttft = s.token_events[0][0] - s.t0
    P = s.usage["prompt_tokens"]
    assert P == 2006 and s.usage["prompt_tokens_details"]["cached_tokens"] == 0
    assert ttft == pytest.approx(P / 10000, abs=0.08)
    t = _truth(p.port)
    assert t["true_prefill_tps"] == pytest.approx(10000, rel=1e-6)
    assert t["t_first"] - t["t_prefill_end"] < 0.02
    m = metrics(p.port)
    assert m['vllm:request_prefill_time_seconds_count{engine="0",model_name="sim-test"}'] == 1
    assert metric_sum(m, "vllm:request_prefill_time_seconds_sum") == pytest.approx(P / 10000)


# ---- prefix cache ----------------------------------------------------------------------------------


def test_prefix_cache_repeat_and_nonce_position(sim):
    p = sim("--set", "prefill_tps=5000")
    port = p.port
    text = " ".join(f"v{i}" for i in range(1000))
    before = metrics(port)
    runs = {}
    for name, content in [
        ("first", text),
        ("repeat", text),
        ("nonce_first", "zq91 " + text),
        ("nonce_last", text + " zq92"),
    ]:
        s = stream(port, "/v1/chat/completions", chat(content, 2, stream_options={"include_usage": True}))
        runs[name] = (s.usage["prompt_tokens_details"]["cached_tokens"], s.token_events[0][0] - s.t0, s.usage)
    assert runs["first"][0] == 0 and runs["nonce_first"][0] == 0
    P = runs["repeat"][2]["prompt_tokens"]
    assert runs["repeat"][0] == (P - 1) // 16 * 16
    assert runs["nonce_last"][0] >= P - 32
    assert runs["repeat"][1] < runs["first"][1] / 3  # TTFT shrinks when the prefix is not re-prefilled
    after = metrics(port)
    hits = metric_sum(after, "vllm:prefix_cache_hits_total") - metric_sum(
        before, "vllm:prefix_cache_hits_total"
    )
    queries = metric_sum(after, "vllm:prefix_cache_queries_total") - metric_sum(
        before, "vllm:prefix_cache_queries_total"
    )
    assert hits == runs["repeat"][0] + runs["nonce_last"][0]
    assert queries == sum(r[2]["prompt_tokens"] for r in runs.values())
    assert 'block_size="16"' in "".join(after) and 'kv_cache_size_tokens="100000"' in "".join(after)


# ---- speculative decoding ------------------------------------------------------------------------


def test_spec_chunks_and_vllm_counters(sim):
    p = sim(
        "--set",
        "spec_method=dspark",
        "--set",
        "spec_k=3",
        "--set",
        "spec_accept=0.9,0.6,0.3",
        "--set",
        "decode_tps=2000",
    )
    port = p.port
    before = metrics(port)
    total = 0
    for i in range(3):
        s = stream(port, "/v1/chat/completions", chat(f"spec {i}", 200, **CONT))
        counts = [e["usage"]["completion_tokens"] for _, e in s.token_events]
        sizes = [b - a for a, b in zip([0, *counts], counts, strict=False)]
        assert sizes[0] == 1 and sum(sizes) == 200 == s.usage["completion_tokens"]
        assert max(sizes) > 1 and all(1 <= n <= 4 for n in sizes)  # 1 + accepted per chunk
        t = _truth(port)
        assert t["steps"] == len(sizes) - 1 == t["drafts"] and t["chunks"] == len(sizes)
        total += 200
    after = metrics(port)

    def d(name):
        return metric_sum(after, name) - metric_sum(before, name)

    truth = get_json(port, "/sim/requests")["requests"][-3:]
    assert d("vllm:generation_tokens_total") == total
    assert d("vllm:spec_decode_num_drafts_total") == sum(r["steps"] for r in truth)
    assert d("vllm:spec_decode_num_draft_tokens_total") == 3 * sum(r["steps"] for r in truth)
    assert d("vllm:spec_decode_num_accepted_tokens_total") == sum(r["accepted"] for r in truth)
    assert d("vllm:spec_decode_num_accepted_tokens_per_pos_total") == sum(r["accepted"] for r in truth)
    # tokens = first + one per step + accepted, minus what the last step of each request cut off
    cut = sum(1 + r["steps"] + r["accepted"] - r["completion_tokens"] for r in truth)
    assert 0 <= cut <= 3 * 3
    pos = [
        after[
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="sim-test",'
            f'position="{i}"}}'
        ]
        for i in range(3)
    ]
    assert pos == sorted(pos, reverse=True)


def test_sglang_flavour(sim):
    p = sim(
        "--flavor",
        "sglang",
        "--set",
        "spec_method=eagle",
        "--set",
        "spec_k=2",
        "--set",
        "spec_accept=0.8,0.5",
        "--set",
        "sglang_warmup_s=0.5",
        "--set",
        "decode_tps=1000",
        wait=False,
    )
    port = p.wait_up()
    assert any("Uvicorn running on" in line for line in p.lines)
    assert request(port, "GET", "/health")[0] == 503  # up but warming
    p.wait_line("The server is fired up and ready to roll!")
    assert request(port, "GET", "/health")[0] == 200
    text = "\n".join(p.lines)
    assert (
        re.search(r"KV Cache (?:is allocated|VA upper bound)\..*?#tokens: (\d+)", text).group(1) == "100000"
    )
    assert re.search(r"max_total_num_tokens=(\d+)", text).group(1) == "100000"
    assert re.search(r"Load weight end\.(?: elapsed=([\d.]+) s,)?.*?mem usage=([\d.]+) GB", text)
    info = get_json(port, "/server_info")
    assert (
        info["max_total_num_tokens"] == 100000 and info["internal_states"][0]["avg_spec_accept_length"] == 1.0
    )
    # continuous usage is independent of include_usage on SGLang
    s = stream(port, "/v1/chat/completions", chat("sg", 50, stream_options={"continuous_usage_stats": True}))
    assert s.token_events[-1][1]["usage"]["completion_tokens"] == 50 and s.usage is None
    m = metrics(port)
    t = _truth(port)
    assert metric_sum(m, "sglang:generation_tokens_total") == 50
    assert metric_sum(m, "sglang:spec_verify_calls_total") == t["steps"]
    acc_len = get_json(port, "/server_info")["internal_states"][0]["avg_spec_accept_length"]
    assert acc_len == pytest.approx((t["steps"] + t["accepted"]) / t["steps"])
    assert metric_sum(m, "sglang:spec_accept_length") == pytest.approx(acc_len)
    st, body = request(port, "POST", "/flush_cache")
    assert st == 200
    assert get_json(port, "/server_info")["internal_states"][0]["avg_spec_accept_length"] == 1.0
    assert not any(k.startswith("vllm:") for k in m)


# ---- faults ----------------------------------------------------------------------------------------


def test_http500_on_nth_request(sim):
    p = sim("--set", "fault_http500_request=2")
    codes = [
        request(p.port, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})[0] for _ in range(3)
    ]
    assert codes == [200, 500, 200]


def test_exit_mid_stream(sim):
    p = sim("--set", "fault_exit_request=2", "--set", "fault_exit_after_tokens=5")
    assert stream(p.port, "/v1/chat/completions", chat("fine", 8)).done
    try:
        s = stream(p.port, "/v1/chat/completions", chat("dies", 50, **CONT))
        got = s.token_events[-1][1]["usage"]["completion_tokens"] if s.token_events else 0
        assert not s.done and got == 5
    except (http.client.HTTPException, ConnectionError):
        pass  # the socket may also break before the last chunk is read
    assert p.proc.wait(10) == 3
    # the stderr reader thread may still be delivering the last line when the process has exited
    assert p.wait_line("simulated fault: exit after 5 tokens of request 2", timeout=5)


def test_stall_keeps_connection_open(sim):
    p = sim("--set", "fault_stall_request=1", "--set", "fault_stall_after_tokens=4")
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=0.6)
    with pytest.raises(TimeoutError):
        stream(p.port, "/v1/chat/completions", chat("stalls", 50, **CONT), conn=c)
    c.close()
    t = _truth(p.port, 1)
    assert t["status"] == "stalled" and t["completion_tokens"] == 4
    assert request(p.port, "GET", "/health")[0] == 200  # the server itself is alive
    assert stream(p.port, "/v1/chat/completions", chat("next", 3)).done


def test_stall_chunks_received_before_stall(sim):
    p = sim("--set", "fault_stall_request=1", "--set", "fault_stall_after_tokens=4")
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=5)
    s = stream(
        p.port, "/v1/chat/completions", chat("stalls", 50, **CONT), conn=c, max_events=5
    )  # role + 4 tokens
    assert [e["usage"]["completion_tokens"] for _, e in s.events] == [0, 1, 2, 3, 4]
    c.sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        c.sock.recv(1)  # open, silent
    c.close()


def test_labkit_cli_serves_preset():
    """`python -m labkit sim --preset dsv41-stock` boots with the lab note's KV line and model name."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "labkit",
            "sim",
            "--preset",
            "dsv41-stock",
            "--port",
            "0",
            "--set",
            "boot_weights_s=0.01",
            "--set",
            "boot_init_s=0.01",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        port = None
        for line in proc.stderr:
            if "GPU KV cache size" in line:
                assert "8,726,823 tokens, Maximum concurrency for 131,072 tokens per request: 66.58x" in line
            m = re.search(r"Starting vLLM server on http://[^:]+:(\d+)", line)
            if m:
                port = int(m.group(1))
            if "Application startup complete" in line:
                break
        assert port
        assert get_json(port, "/v1/models")["data"][0]["id"] == "sim-dsv41"
        assert get_json(port, "/version")["preset"] == "dsv41-stock"
    finally:
        proc.terminate()
        proc.wait(10)


def test_simprocess_reports_boot_failure():
    from labkit.errors import LabkitError
    from labkit.sim.process import SimProcess

    with (
        pytest.raises(LabkitError, match="exited during boot"),
        SimProcess(["--preset", "test", "--set", "fault_boot_crash=disk on fire"]),
    ):
        pass
    with SimProcess(["--preset", "test"]) as p:
        assert request(p.port, "GET", "/health")[0] == 200 and p.url == f"http://127.0.0.1:{p.port}"
    assert p.proc.returncode is not None


def test_client_disconnect_aborts_and_frees_batch_slot(sim):
    p = sim("--set", "decode_tps=100")
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=5)
    s = stream(p.port, "/v1/chat/completions", chat("leaving early", 500, **CONT), conn=c, max_events=4)
    assert len(s.events) == 4
    c.close()
    deadline = time.monotonic() + 5
    while _truth(p.port, 1)["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.02)
    t = _truth(p.port, 1)
    assert t["status"] == "aborted" and t["completion_tokens"] < 500
    m = metrics(p.port)
    assert metric_sum(m, "vllm:num_requests_running") == 0 and metric_sum(m, "vllm:num_requests_waiting") == 0
    # the next request decodes at the c1 rate again (the aborted one left the batch)
    s = stream(p.port, "/v1/chat/completions", chat("alone", 21, **CONT))
    assert _median_tps(s) == pytest.approx(100, rel=0.1)
