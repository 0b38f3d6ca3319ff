"""Engine adapters and runtimes as data: generated commands, probes, boot-log facts and fatal lines."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest

from labkit.errors import LabkitError
from labkit.recipe.lookup import load_plan
from labkit.serve import lane_commands
from labkit.serve.engines import BootLog, NodeSpec, engine_for
from labkit.serve.engines.llamacpp import LlamaCpp
from labkit.serve.engines.sglang import Sglang
from labkit.serve.engines.sim import Sim
from labkit.serve.engines.vllm import Vllm
from labkit.serve.runtimes import DockerRuntime, ProcessRuntime

NODES = [NodeSpec(n, f"10.0.0.{i + 5}") for i, n in enumerate(["dgx5", "dgx6", "dgx7", "dgx8"])]


def flags(argv) -> dict[str, str | None]:
    """--flag value pairs of an argv ({flag: value or None for bare flags})."""
    out: dict[str, str | None] = {}
    args = list(argv)
    for i, a in enumerate(args):
        if a.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[a] = None if nxt is None or nxt.startswith("--") else nxt
    return out


def test_vllm_native_multinode_flags():
    plan = load_plan("dsv41")
    launches = Vllm().launch(plan, NODES)
    assert [ln.rank for ln in launches] == [0, 1, 2, 3]
    for ln in launches:
        f = flags(ln.argv)
        assert ln.argv[:3] == ("vllm", "serve", plan.model_path)
        assert f["--nnodes"] == "4" and f["--node-rank"] == str(ln.rank)
        assert f["--master-addr"] == "10.0.0.5" and f["--master-port"] == "29501"
        assert f["--data-parallel-backend"] == "mp"
        assert f["--tensor-parallel-size"] == "4"
        assert ("--headless" in ln.argv) == (ln.rank > 0)
        assert ln.serves_http == (ln.rank == 0)
        assert dict(ln.env)["VLLM_HOST_IP"] == NODES[ln.rank].address
        assert dict(ln.env)["VLLM_ENGINE_READY_TIMEOUT_S"] == "1800"
        assert ln.argv.count("--served-model-name") == 1


def test_vllm_single_node_has_no_multinode_flags():
    plan = load_plan("dsv41")
    (ln,) = Vllm().launch(plan, NODES[:1])
    assert not {"--nnodes", "--node-rank", "--headless", "--data-parallel-backend"} & set(ln.argv)


def test_vllm_ray_variant():
    plan = load_plan("dsv41")
    plan = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, multinode="ray"))
    head, *workers = Vllm().launch(plan, NODES)
    assert head.argv[:2] == ("bash", "-c")
    script = head.argv[2]
    assert script.startswith("ray start --head --node-ip-address=10.0.0.5 --port=6379 || exit 1; ")
    # the head waits until `ray status` lists all four nodes before serving
    assert 'grep -c " node_")" -ge 4 ]' in script and "fewer than 4 nodes joined" in script
    serve = shlex.split(script.split("; exec ", 1)[1])
    assert flags(serve)["--distributed-executor-backend"] == "ray"
    assert "--nnodes" not in serve
    for w, node in zip(workers, NODES[1:], strict=True):
        assert w.argv[:3] == ("ray", "start", "--block")
        assert "--address=10.0.0.5:6379" in w.argv
        env = dict(w.env)
        assert (
            env["VLLM_HOST_IP"]
            == env["RAY_NODE_IP_ADDRESS"]
            == env["RAY_OVERRIDE_NODE_IP_ADDRESS"]
            == node.address
        )


def test_vllm_ray_lanes_switch_off_rays_memory_monitor_unless_the_recipe_sets_it():
    """Ray's monitor kills the largest worker once a node passes its memory threshold; on unified memory a vLLM
    rank's GPU pool counts as host memory, so every Ray node gets RAY_memory_monitor_refresh_ms=0."""
    plan = load_plan("dsv41")
    ray = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, multinode="ray"))
    assert all(dict(ln.env)["RAY_memory_monitor_refresh_ms"] == "0" for ln in Vllm().launch(ray, NODES))
    env = (*ray.engine.env, ("RAY_memory_monitor_refresh_ms", "250"))
    own = dataclasses.replace(ray, engine=dataclasses.replace(ray.engine, env=env))
    assert {dict(ln.env)["RAY_memory_monitor_refresh_ms"] for ln in Vllm().launch(own, NODES)} == {"250"}
    assert not [ln for ln in Vllm().launch(plan, NODES) if "RAY_memory_monitor_refresh_ms" in dict(ln.env)]


def test_ray_head_waits_for_every_node_for_real(tmp_path):
    """The head script with a `ray` stand-in on PATH: serving starts only once `ray status` lists 2 nodes."""
    import os
    import subprocess

    from labkit.serve.engines.vllm import ray_head_script

    calls = tmp_path / "calls"
    ray = tmp_path / "ray"
    # `ray status` lists one more active node per call, as workers join
    ray.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'if [ "$1" = status ]; then n=$(grep -c status ' + str(calls) + "); "
        'echo "Active:"; i=0; while [ $i -lt $n ]; do echo " 1 node_$i"; i=$((i+1)); done; fi\n'
    )
    ray.chmod(0o755)
    script = ray_head_script("10.0.0.5", 2, ["echo", "serving"])
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == ["ray: 2 nodes joined", "serving"]
    assert calls.read_text().splitlines()[0].startswith("start --head --node-ip-address=10.0.0.5")
    assert calls.read_text().count("status") == 2


def test_sglang_multinode_flags():
    plan = load_plan("prod")
    launches = Sglang().launch(plan, NODES)
    for ln in launches:
        f = flags(ln.argv)
        assert ln.argv[:3] == ("python3", "-m", "sglang.launch_server")
        assert f["--model-path"] == plan.model_path
        assert (f["--tp-size"], f["--ep-size"]) == ("4", "2") and "--tp" not in f
        assert (f["--nnodes"], f["--node-rank"]) == ("4", str(ln.rank))
        assert f["--dist-init-addr"] == "10.0.0.5:20000"
        assert f["--speculative-algorithm"] == "DSPARK"
        assert dict(ln.env)["SGLANG_HOST_IP"] == NODES[ln.rank].address
    assert [ln.serves_http for ln in launches] == [True, False, False, False]


def test_recipe_flags_win_over_derived():
    plan = load_plan("prod")
    args = plan.engine.args + (("--dist-init-addr", ("10.9.9.9:5000",)), ("--tp-size", ("8",)))
    plan = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, args=args))
    ln = Sglang().launch(plan, NODES)[1]
    assert ln.argv.count("--dist-init-addr") == 1 and flags(ln.argv)["--dist-init-addr"] == "10.9.9.9:5000"
    assert "--tp" not in ln.argv and ln.argv.count("--tp-size") == 1


def test_llamacpp_single_node_only():
    plan = load_plan("sim")
    plan = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, kind="llamacpp", args=()))
    (ln,) = LlamaCpp().launch(plan, [NodeSpec("localhost", "127.0.0.1")], python="/py")
    assert ln.argv[:3] == ("/py", "-m", "llama_cpp.server")
    assert flags(ln.argv)["--interrupt_requests"] == "False"
    assert [p.path for p in LlamaCpp().probes(plan)] == ["/v1/models"]
    with pytest.raises(LabkitError, match="one node"):
        LlamaCpp().launch(plan, NODES)


def test_tiny_llamacpp_decodes_on_one_thread_and_prefills_on_two():
    """Regression (issue 8): with --n_threads 2 on a 2-core host, decode samples were bimodal (~1600 vs ~400 t/s,
    and ~10 t/s beside one busy process) because ggml's two threads wait on each other at every op while the
    client or the server's own event loop holds a core. Both counts are pinned so other hosts run the same thing."""
    from tests.support.llamacpp import DECODE_THREADS

    for size in ("default", "small"):
        plan = load_plan("tiny-llamacpp", size=size)
        (ln,) = LlamaCpp().launch(plan, [NodeSpec("localhost", "127.0.0.1")], python="/py")
        got = flags(ln.argv)
        assert (got["--n_threads"], got["--n_threads_batch"]) == ("1", "2")
        assert ln.argv.count("--n_threads") == 1
    # The test servers of tests/support/llamacpp.py run the same thread counts as the recipe.
    assert flags(DECODE_THREADS) == {"--n_threads": "1", "--n_threads_batch": "2"}


def test_sim_launch_and_flavor():
    plan = load_plan("sim")
    eng = engine_for(plan)
    assert isinstance(eng, Sim) and eng.flavor == "vllm"
    (ln,) = eng.launch(plan, [NodeSpec("localhost", "127.0.0.1")], python="/py")
    assert list(ln.argv) == [
        "/py",
        "-m",
        "labkit.sim",
        "--host",
        "127.0.0.1",
        "--port",
        "18000",
        "--model-name",
        "sim-dsv41",
        "--preset",
        "dsv41-stock",
        "--enable-per-request-metrics",  # a bare switch, as vLLM's; the sim reads it as true
    ]
    plan = dataclasses.replace(
        plan, engine=dataclasses.replace(plan.engine, args=plan.engine.args + (("--flavor", ("sglang",)),))
    )
    assert engine_for(plan).flavor == "sglang"


# ---------------------------------------------------------------------------------------------- boot logs

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "fixtures"

VLLM_NEW = """\
INFO 10-23 10:00:00 [startup.py:38] vLLM server version 0.33.0, serving model /m
(EngineCore_DP0 pid=77) INFO 10-23 10:00:01 [gpu_model_runner.py:4979] Starting to load model /m...
(EngineCore_DP0 pid=77) INFO 10-23 10:09:50 [default_loader.py:507] Loading weights took 589.31 seconds
(EngineCore_DP0 pid=77) INFO 10-23 10:09:51 [gpu_model_runner.py:5089] Model loading took 110.85 GiB memory and 590.123456 seconds
(EngineCore_DP0 pid=77) INFO 10-23 10:10:30 [backends.py:1188] torch.compile took 31.20 s in total
(EngineCore_DP0 pid=77) INFO 10-23 10:10:40 [kv_cache_utils.py:1136] GPU KV cache size: 8,726,823 tokens, Maximum concurrency for 131,072 tokens per request: 66.58x
(EngineCore_DP0 pid=77) INFO 10-23 10:11:00 [gpu_model_runner.py:6517] Graph capturing finished in 12 secs, took 0.55 GiB
(EngineCore_DP0 pid=77) INFO 10-23 10:11:00 [core.py:391] init engine (profile, create kv cache, warmup model) took 70.12 s (compilation: 31.2 s)
INFO 10-23 10:11:01 [launcher.py:188] Starting vLLM server on http://0.0.0.0:8000
INFO:     Application startup complete.
"""

VLLM_OLD = """\
\x1b[1;36mINFO\x1b[0m 10-15 09:00:00 [api_server.py:1839] vLLM API server version 0.11.0
INFO 10-15 09:05:00 [default_loader.py:507] Loading weights took 300.00 seconds
INFO 10-15 09:05:01 [gpu_model_runner.py:2602] Model loading took 110.8500 GiB and 301.000000 seconds
INFO 10-15 09:06:00 [kv_cache_utils.py:1087] GPU KV cache size: 1,234,567 tokens
INFO 10-15 09:06:00 [kv_cache_utils.py:1091] Maximum concurrency for 32,768 tokens per request: 37.68x
INFO 10-15 09:06:10 [core.py:210] init engine (profile, create kv cache, warmup model) took 60.50 seconds
INFO 10-15 09:06:11 [api_server.py:1880] Starting vLLM API server 0 on http://0.0.0.0:8000
"""


def parse(engine, text: str):
    log = BootLog(engine, "n", True)
    # feed in awkward chunks: lines must be reassembled across chunk borders
    for i in range(0, len(text), 37):
        log.feed(text[i : i + 37])
    log.flush()
    return log, engine.facts(log.matches)


def test_vllm_facts_new_wording():
    log, f = parse(Vllm(), VLLM_NEW)
    assert log.fatal is None
    assert f.engine_version == "0.33.0"
    assert (f.weights_seconds, f.load_seconds, f.weights_gib) == (589.31, 590.123456, 110.85)
    assert (f.kv_pool_tokens, f.kv_pool_context, f.max_concurrency) == (8_726_823, 131_072, 66.58)
    assert (f.compile_seconds, f.graph_capture_seconds, f.engine_init_seconds) == (31.2, 12, 70.12)
    assert "8,726,823 tokens" in f.lines["kv_tokens"]
    assert "ready" in f.lines


def test_vllm_facts_old_wording():
    _, f = parse(Vllm(), VLLM_OLD)
    assert f.engine_version == "0.11.0"
    assert (f.kv_pool_tokens, f.kv_pool_context, f.max_concurrency) == (1_234_567, 32_768, 37.68)
    assert (f.load_seconds, f.engine_init_seconds) == (301.0, 60.5)
    assert f.lines["version"].startswith("INFO")  # ANSI colour stripped


SGLANG = """\
[2026-10-23 10:00:00 TP0] Load weight begin. avail mem=110.00 GB
[2026-10-23 10:08:00 TP0] Load weight end. elapsed=480.25 s, type=DeepseekV4ForCausalLM, avail mem=40.00 GB, mem usage=70.00 GB.
[2026-10-23 10:08:10 TP0] KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 2500000, KV size: 20.00 GB
[2026-10-23 10:08:11 TP0] max_total_num_tokens=2400000, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=48, context_len=131072, available_gpu_mem=10.0 GB
[2026-10-23 10:08:40 TP0] Capture cuda graph end. Time elapsed: 25.50 s. mem usage=1.2 GB. avail mem=8.8 GB.
INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)
[2026-10-23 10:09:00] The server is fired up and ready to roll!
"""


def test_sglang_facts():
    log, f = parse(Sglang(), SGLANG)
    assert log.fatal is None
    assert f.load_seconds == 480.25 and f.weights_gib == 70.0
    assert (f.kv_pool_tokens, f.kv_pool_context, f.max_concurrency) == (2_400_000, 131_072, 48.0)
    assert f.graph_capture_seconds == 25.5
    assert "ready" in f.lines


def test_sglang_new_graph_wording():
    _, f = parse(
        Sglang(), "Capture target decode CUDA graph end. bs=[1, 2], elapsed=3.25 s, mem usage=0.5 GB.\n"
    )
    assert f.graph_capture_seconds == 3.25


@pytest.mark.parametrize(
    "line,reason",
    [
        (
            "ERROR [core.py:1010] Installed InstantTensor does not expose the metadata layout this loader needs",
            "InstantTensor",
        ),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out of memory"),
        ("RuntimeError: Engine core initialization failed. See root cause above.", "initialization failed"),
    ],
)
def test_fatal_lines(line, reason):
    log = BootLog(Vllm(), "n", True)
    log.feed("INFO fine\n" + line + "\n")
    assert log.fatal is not None and reason in log.fatal[0] and log.fatal[1] == line


def test_traceback_then_error_is_fatal_but_plain_warnings_are_not():
    log = BootLog(Vllm(), "n", True)
    log.feed("WARNING something is deprecated\nINFO ValueErrors are counted\n")
    assert log.fatal is None
    log.feed(
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n    raise KeyError('a')\n"
        "(EngineCore pid=5) KeyError: 'a'\n"
    )
    assert log.fatal == ("uncaught exception", "(EngineCore pid=5) KeyError: 'a'")


def test_a_traceback_ends_at_its_first_plain_line():
    """A traceback whose last line is no "...Error:" (here an interrupted warmup) does not make a later
    warning that mentions an error fatal."""
    log = BootLog(Vllm(), "n", True)
    log.feed(
        'Traceback (most recent call last):\n  File "warmup.py", line 3, in run\n    step()\n'
        "    ^^^^^^\nKeyboardInterrupt\nINFO model loaded\n"
    )
    log.feed("WARNING hub fetch failed, retrying after ConnectionError: connection refused\n")
    assert log.fatal is None
    log.feed(
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError: bad shape\n'
    )
    assert log.fatal == ("uncaught exception", "ValueError: bad shape")


def test_traceback_of_a_prefixed_worker_process_is_followed():
    log = BootLog(Vllm(), "n", True)
    log.feed(
        "(EngineCore_DP0 pid=7) Traceback (most recent call last):\n"
        '(EngineCore_DP0 pid=7)   File "x.py", line 1, in <module>\n(EngineCore_DP0 pid=7)     load()\n'
        "(EngineCore_DP0 pid=7) ValueError: bad shape\n"
    )
    assert log.fatal == ("uncaught exception", "(EngineCore_DP0 pid=7) ValueError: bad shape")


def test_sglang_child_death_is_fatal():
    log = BootLog(Sglang(), "n", True)
    log.feed("[2026] Received sigquit from a child process. It usually means the child failed.\n")
    assert log.fatal is not None


# ---------------------------------------------------------------------------------------------- runtimes


def test_docker_start_command():
    plan = load_plan("dsv41", staging="local-view")
    ln = Vllm().launch(plan, NODES)[2]
    argv = shlex.split(DockerRuntime(plan.lane_id).start_command(ln, plan.engine.image, plan.mounts()))
    name = f"{plan.lane_id}-dgx7"
    assert argv[:5] == ["docker", "run", "-d", "--name", name]
    i = argv.index(plan.engine.image)
    opts, engine_argv = argv[:i], argv[i + 1 :]
    assert tuple(engine_argv) == ln.argv
    assert f"labkit.lane={plan.lane_id}" in opts
    for flag, value in [("--network", "host"), ("--ipc", "host"), ("--gpus", "all")]:
        assert opts[opts.index(flag) + 1] == value
    mounts = [opts[j + 1] for j, a in enumerate(opts) if a == "-v"]
    assert mounts == [f"{h}:{c}" for h, c in plan.mounts()]
    assert "/home/kilork/models/dsv41-1017-local:/root/.cache/hf-view" in mounts
    envs = [opts[j + 1] for j, a in enumerate(opts) if a == "-e"]
    assert "VLLM_HOST_IP=10.0.0.7" in envs and "HF_HUB_OFFLINE=1" in envs
    assert engine_argv[2] == "/root/.cache/hf-view"  # the engine sees the view at its container path


def test_json_args_survive_quoting():
    plan = load_plan("dsv41", spec="dspark")
    cmd = lane_commands(plan)["dgx5"]
    argv = shlex.split(cmd)
    assert argv[argv.index("--speculative-config") + 1] == '{"method":"dspark","num_speculative_tokens":5}'


def test_process_runtime_paths_are_per_lane_and_node():
    rt = ProcessRuntime("labkit-x-1234")
    assert '/lanes/labkit-x-1234; P="$D"/dgx5.pid' in rt.alive_command("dgx5")
    assert rt.name("a b") == "labkit-x-1234-a_b"
    cmd = rt.start_command(NodeLaunchLike(), None, [])
    assert "setpgrp(0, 0)" in cmd and "else set -- setsid" in cmd  # own group, own session only without perl


def NodeLaunchLike():
    from labkit.serve.engines import NodeLaunch

    return NodeLaunch("n1", 0, ("echo", "it's"), (("K", "v w"),), True)


def test_show_prints_every_node_command():
    import contextlib
    import io

    from labkit.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(["show", "dsv41"]) == 0
    out = buf.getvalue()
    for node in ("dgx5", "dgx6", "dgx7", "dgx8"):
        assert (
            f"[{node}] mkdir -p " in out
            and " docker run -d --name labkit-dsv41-flash-1017-4x-vllm032-" in out
        )
    assert out.count("--headless") == 3


def test_vllm_facts_cpu_wording_from_a_real_log():
    """vLLM 0.32's CPU build says "CPU KV cache size", names its version only on the engine-core line and has no
    "Model loading took" (a real boot log of the tiny model, recorded on this kind of machine)."""
    text = (FIXTURES / "vllm-0.32-cpu" / "boot-ngram.log").read_text()
    log, f = parse(Vllm(), text)
    assert log.fatal is None
    assert f.engine_version == "0.32.0"
    assert (f.kv_pool_tokens, f.kv_pool_context, f.max_concurrency) == (524_288, 16_384, 32.0)
    assert f.lines["kv_tokens"].endswith(
        "CPU KV cache size: 524,288 tokens, Maximum concurrency for 16,384 tokens per request: 32.00x"
    )
    assert f.weights_seconds == 0.0 and f.model_init_seconds == 0.10914
    assert f.engine_init_seconds == 26.34
    assert f.spec_tokens == 4
    assert f.load_seconds is None  # the CPU runner prints no "Model loading took"
    assert "ready" in f.lines


def test_a_local_process_vllm_lane_runs_the_vllm_beside_labkits_interpreter(tmp_path):
    """A local process lane runs the `vllm` of labkit's own environment (it need not be on PATH); a node or a
    container runs `vllm` from its PATH."""
    import sys

    from labkit.serve import lane_commands

    plan = load_plan("tiny-vllm")
    plan = dataclasses.replace(plan, model=dataclasses.replace(plan.model, path=str(tmp_path)))
    (cmd,) = lane_commands(plan).values()
    beside = str(Path(sys.executable).parent / "vllm")
    assert f"{shlex.quote(beside)} serve {shlex.quote(str(tmp_path))} --port 18670" in cmd
    assert Vllm().launch(plan, NODES[:1])[0].argv[:2] == ("vllm", "serve")


def test_a_long_matched_line_is_kept_as_its_start_and_the_match():
    """vLLM's engine-core line (several KB of config) is stored as an excerpt that still shows what matched."""
    text = (FIXTURES / "vllm-0.32-cpu" / "boot-ngram.log").read_text()
    long_line = next(line for line in text.splitlines() if "Initializing a V1 LLM engine" in line)
    assert len(long_line) > 3000
    _, f = parse(Vllm(), text)
    kept = f.lines["spec_tokens"]
    assert len(kept) < 450 and kept.startswith(long_line[:100])
    assert "num_spec_tokens=4" in kept and kept.endswith(" …")
    assert f.lines["ready"] == "INFO:     Application startup complete."  # short lines stay whole
