"""vLLM: `vllm serve` launch (native multi-node or Ray), readiness, boot-log facts (0.11, 0.32 CPU and 0.33
wording; docs/engines.md, "vLLM boot log lines")."""

from __future__ import annotations

import os
import re
import shlex

from labkit.recipe import LanePlan
from labkit.serve.engines.base import (
    BootFacts,
    Engine,
    NodeLaunch,
    NodeSpec,
    env_tuple,
    model_flags_present,
    number,
    parallel_flags,
    pattern,
)

MASTER_PORT = 29501
RAY_PORT = 6379
RAY_JOIN_WAIT = 120  # seconds the Ray head waits for every node to join
# Ray's memory monitor kills the largest worker once a node's memory use passes its threshold (95 %); on unified
# memory (DGX Spark) a vLLM rank's GPU pool is host memory too, so eugr's launcher and sparkrun switch it off.
# A default: the recipe's engine.env wins (docs/engines.md, "Multi-node launch flags").
RAY_DEFAULT_ENV = {"RAY_memory_monitor_refresh_ms": "0"}

# `vllm serve` flags commonly set or swept, each listed by the real `vllm serve --help=all` of vLLM 0.32.0 and
# in docs.vllm.ai's engine arguments; with every flag serve_argv and the launches add. Looked up after
# canonical() (`--a_b` is `--a-b`, `--a.b` is `--a`); docs/engines.md, "Known flags and the sweep flag check".
VLLM_KNOWN_FLAGS = frozenset(
    {
        # scheduler and memory
        "--max-num-batched-tokens", "--max-num-seqs", "--gpu-memory-utilization", "--max-model-len",
        "--kv-cache-dtype", "--kv-cache-memory-bytes", "--block-size", "--num-gpu-blocks-override",
        "--enable-prefix-caching", "--no-enable-prefix-caching", "--prefix-caching-hash-algo",
        "--enable-chunked-prefill", "--no-enable-chunked-prefill", "--long-prefill-token-threshold",
        "--scheduling-policy", "--async-scheduling", "--no-async-scheduling", "--cpu-offload-gb",
        # speculative decoding, compilation and graphs
        "--speculative-config", "--compilation-config", "-cc", "--enforce-eager", "--no-enforce-eager",
        "--max-cudagraph-capture-size", "--attention-backend",
        # parallelism and multi-node (labkit adds these: serve_argv, launch, _launch_ray)
        "--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp",
        "--data-parallel-size-local", "--data-parallel-backend", "--enable-expert-parallel", "-ep",
        "--enable-eplb", "--eplb-config", "--all2all-backend", "--decode-context-parallel-size", "-dcp",
        "--distributed-executor-backend", "--disable-custom-all-reduce", "--nnodes", "--node-rank",
        "--master-addr", "--master-port", "--headless", "--api-server-count",
        # model and weights
        "--quantization", "-q", "--dtype", "--load-format", "--safetensors-load-strategy", "--download-dir",
        "--model-loader-extra-config", "--trust-remote-code", "--tokenizer", "--tokenizer-mode", "--revision",
        "--hf-overrides", "--generation-config", "--seed", "--max-logprobs",
        # API server
        "--served-model-name", "--host", "--port", "--disable-log-stats", "--enable-prompt-tokens-details",
        "--reasoning-parser", "--tool-call-parser", "--enable-auto-tool-choice", "--uvicorn-log-level",
        "--enable-sleep-mode", "--kv-transfer-config", "--limit-mm-per-prompt",
        # per-request figures in the responses (docs/engines.md, "Per-request metrics in the response")
        "--enable-per-request-metrics", "--per-request-spec-decode-metrics",
    }
)  # fmt: skip


class Vllm(Engine):
    kind = "vllm"
    ready_pattern = "ready"
    help_flag = "--help=all"  # plain --help lists only the option groups
    package = "vllm"
    known_flags = VLLM_KNOWN_FLAGS
    patterns = (
        pattern("version", r"vLLM (?:API )?server version ([^\s,]+)", "vLLM version"),
        pattern("engine_version", r"Initializing a V1 LLM engine \(v([^)\s]+)\)", "engine core starting"),
        pattern(
            "spec_tokens", r"speculative_config=SpeculativeConfig\(.*?num_spec_tokens=(\d+)", "speculation"
        ),
        pattern("worker_version", r"Launching vLLM \(v([^)]+)\) headless", "headless worker up"),
        pattern("load_start", r"Starting to load model (\S+)", "loading model"),
        pattern("model_init", r"Initializing model took ([\d.]+) seconds", "model initialised"),
        pattern("weights", r"Loading weights took ([\d.]+) seconds", "weights read"),
        pattern(
            "model_load", r"Model loading took ([\d.]+) GiB(?: memory)? and ([\d.]+) seconds", "model loaded"
        ),
        pattern("compile", r"torch\.compile (?:took|takes) ([\d.]+) s in total", "torch.compile done"),
        pattern("kv_tokens", r"KV cache size: ([\d,]+) tokens", "KV cache sized"),
        pattern(
            "concurrency",
            r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x",
            "max concurrency",
        ),
        pattern(
            "graphs", r"Graph capturing finished in (\d+) secs?, took ([\d.]+) GiB", "CUDA graphs captured"
        ),
        pattern("engine_init", r"init engine .* took ([\d.]+) s", "engine initialised"),
        pattern("api", r"Starting vLLM (?:API )?server (?:\d+ )?on (\S+)", "API server starting"),
        pattern("ready", r"Application startup complete", "application startup complete"),
    )

    def apply(self, facts: BootFacts, name: str, m: re.Match) -> None:
        if name in ("version", "worker_version", "engine_version") and facts.engine_version is None:
            facts.engine_version = m.group(1)
        elif name == "spec_tokens":
            facts.spec_tokens = int(m.group(1))
        elif name == "model_init":
            facts.model_init_seconds = number(m.group(1))
        elif name == "weights":
            facts.weights_seconds = number(m.group(1))
        elif name == "model_load":
            facts.weights_gib = number(m.group(1))
            facts.load_seconds = number(m.group(2))
        elif name == "compile":
            facts.compile_seconds = number(m.group(1))
        elif name == "kv_tokens":
            facts.kv_pool_tokens = int(number(m.group(1)))
        elif name == "concurrency":
            facts.kv_pool_context = int(number(m.group(1)))
            facts.max_concurrency = number(m.group(2))
        elif name == "graphs":
            facts.graph_capture_seconds = number(m.group(1))
        elif name == "engine_init":
            facts.engine_init_seconds = number(m.group(1))

    def command(self, python: str = "python3") -> tuple[str, ...]:
        return (vllm_command(python), "serve")

    def serve_argv(self, plan: LanePlan, extra: list[str], command: str = "vllm") -> list[str]:
        """`vllm serve MODEL` with the lane's parallelism and args; recipe args win over derived flags."""
        e = plan.engine
        argv = [command, "serve", plan.model_path, "--port", str(e.port)]
        argv += parallel_flags(plan, self.kind_facts)
        if not model_flags_present(plan, "--served-model-name"):
            argv += ["--served-model-name", plan.served_name]
        return argv + e.argv() + extra

    def launch(self, plan: LanePlan, nodes: list[NodeSpec], python: str = "python3") -> list[NodeLaunch]:
        if plan.engine.multinode == "ray" and len(nodes) > 1:
            return self._launch_ray(plan, nodes)
        head = nodes[0].address  # the head's fabric address (cluster.head_address is the client's)
        command = vllm_command(python)
        out = []
        for rank, node in enumerate(nodes):
            extra: list[str] = []
            if len(nodes) > 1:
                extra = [
                    "--nnodes",
                    str(len(nodes)),
                    "--node-rank",
                    str(rank),
                    "--master-addr",
                    head,
                    "--master-port",
                    str(MASTER_PORT),
                    "--data-parallel-backend",
                    "mp",
                ]
                if rank > 0:
                    extra.append("--headless")
            out.append(
                NodeLaunch(
                    node.name,
                    rank,
                    tuple(self.serve_argv(plan, extra, command)),
                    env_tuple(plan, {"VLLM_HOST_IP": node.address}, node=node.name),
                    serves_http=rank == 0,
                )
            )
        return out

    def _launch_ray(self, plan: LanePlan, nodes: list[NodeSpec]) -> list[NodeLaunch]:
        """Ray: every node joins a Ray cluster on its fabric address; the head waits until `ray status` lists
        every node (RAY_JOIN_WAIT s at most), then runs `vllm serve` with the ray backend."""
        head = nodes[0].address
        serve = self.serve_argv(plan, ["--distributed-executor-backend", "ray"])
        out = []
        for rank, node in enumerate(nodes):
            env = env_tuple(
                plan,
                {
                    "VLLM_HOST_IP": node.address,
                    "RAY_NODE_IP_ADDRESS": node.address,
                    "RAY_OVERRIDE_NODE_IP_ADDRESS": node.address,
                },
                RAY_DEFAULT_ENV,
                node.name,
            )
            if rank == 0:
                argv: tuple[str, ...] = ("bash", "-c", ray_head_script(node.address, len(nodes), serve))
            else:
                argv = (
                    "ray",
                    "start",
                    "--block",
                    f"--address={head}:{RAY_PORT}",
                    f"--node-ip-address={node.address}",
                )
            out.append(NodeLaunch(node.name, rank, argv, env, serves_http=rank == 0))
        return out


def ray_head_script(address: str, nodes: int, serve: list[str]) -> str:
    """Start the Ray head, wait until `ray status` counts `nodes` active nodes (each is a " node_<id>" line),
    then exec vllm serve; a cluster that does not fill within RAY_JOIN_WAIT s fails with a line saying so."""
    steps = RAY_JOIN_WAIT // 2
    return (
        f"ray start --head --node-ip-address={shlex.quote(address)} --port={RAY_PORT} || exit 1; i=0; "
        f'until [ "$(ray status 2>/dev/null | grep -c " node_")" -ge {int(nodes)} ]; do i=$((i+1)); '
        f'if [ $i -gt {steps} ]; then echo "ray: fewer than {int(nodes)} nodes joined within {RAY_JOIN_WAIT} s" >&2; '
        f'exit 1; fi; sleep 2; done; echo "ray: {int(nodes)} nodes joined"; exec {shlex.join(serve)}'
    )


def vllm_command(python: str) -> str:
    """`vllm` from PATH, or the one beside `python` when that is an interpreter's absolute path (a local process
    lane runs the vllm of labkit's own environment, which need not be on PATH; docs/engines.md, "vLLM CPU build")."""
    return os.path.join(os.path.dirname(python), "vllm") if os.path.isabs(python) else "vllm"
