"""SGLang: `python3 -m sglang.launch_server` multi-node launch, readiness, boot-log facts (old and new wording)."""

from __future__ import annotations

import re

from labkit.recipe import LanePlan
from labkit.serve.engines.base import (
    FATAL_COMMON,
    BootFacts,
    Engine,
    NodeLaunch,
    NodeSpec,
    Probe,
    env_tuple,
    model_flags_present,
    number,
    parallel_flags,
    pattern,
)

DIST_INIT_PORT = 20000
# SGLang stops a TP group whose ranks' free memory differs by more than 10 % before the weights load; on
# unified-memory nodes (DGX Spark) free memory differs node to node, so it is off unless the recipe says.
SGLANG_DEFAULT_ENV = {"SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK": "0"}

# `python3 -m sglang.launch_server` flags commonly set or swept, each in SGLang's server arguments
# (docs/advanced_features/server_arguments.md, python/sglang/srt/server_args.py); with every flag launch()
# adds (docs/engines.md, "Known flags and the sweep flag check"). `--tp` and `--dp`, which SGLang's own docs use,
# reach --tp-size and --dp-size as argparse abbreviations (`--ep` is an alias); the launch adds --tp-size.
SGLANG_KNOWN_FLAGS = frozenset(
    {
        # memory and scheduling
        "--mem-fraction-static", "--max-running-requests", "--max-queued-requests", "--max-total-tokens",
        "--chunked-prefill-size", "--max-prefill-tokens", "--schedule-policy", "--schedule-conservativeness",
        "--page-size", "--context-length", "--kv-cache-dtype", "--disable-radix-cache", "--enable-mixed-chunk",
        "--num-continuous-decode-steps", "--disable-overlap-schedule", "--enable-hierarchical-cache",
        "--cpu-offload-gb",
        # CUDA graphs and compilation
        "--cuda-graph-max-bs", "--cuda-graph-bs", "--disable-cuda-graph", "--disable-cuda-graph-padding",
        "--enable-torch-compile", "--torch-compile-max-bs",
        # kernels
        "--attention-backend", "--prefill-attention-backend", "--decode-attention-backend",
        "--sampling-backend", "--moe-runner-backend", "--moe-a2a-backend", "--deepep-mode",
        # speculative decoding
        "--speculative-algorithm", "--speculative-draft-model-path", "--speculative-num-steps",
        "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--speculative-attention-mode",
        "--speculative-dspark-block-size",
        # parallelism and multi-node (labkit adds these: launch)
        "--tp", "--tp-size", "--tensor-parallel-size", "--pp-size", "--pipeline-parallel-size",
        "--dp", "--dp-size", "--data-parallel-size", "--ep", "--ep-size", "--expert-parallel-size",
        "--enable-dp-attention", "--enable-dp-lm-head", "--enable-eplb", "--ep-num-redundant-experts",
        "--moe-dense-tp-size", "--disable-custom-all-reduce", "--nnodes", "--node-rank", "--dist-init-addr",
        "--nccl-init-addr",
        # model and weights
        "--model-path", "--model", "--tokenizer-path", "--load-format", "--trust-remote-code", "--dtype",
        "--quantization", "--revision", "--random-seed", "--download-dir",
        # API server
        "--host", "--port", "--served-model-name", "--api-key", "--enable-metrics", "--enable-cache-report",
        "--reasoning-parser", "--tool-call-parser", "--chat-template", "--skip-server-warmup", "--log-level",
        "--watchdog-timeout",
    }
)  # fmt: skip


class Sglang(Engine):
    kind = "sglang"
    ready_pattern = "ready"
    package = "sglang"
    known_flags = SGLANG_KNOWN_FLAGS
    # the scheduler's usable capacity first (kv_pool_tokens), then the pool's allocation line
    kv_lines = (("capacity", "log"), ("kv_tokens", "log_allocated"))
    patterns = (
        pattern("weights_start", r"Load weight begin", "loading weights"),
        pattern(
            "weights", r"Load weight end\.(?: elapsed=([\d.]+) s,)?.*?mem usage=([\d.]+) GB", "weights loaded"
        ),
        pattern(
            "kv_tokens", r"KV Cache (?:is allocated|VA upper bound)\..*?#tokens: (\d+)", "KV cache allocated"
        ),
        pattern("capacity", r"max_total_num_tokens=(\d+)", "scheduler sized"),
        pattern(
            "graphs",
            r"Capture (?:cuda graph|\w+ \w+ CUDA graph) end\.(?: Time elapsed: | .*?elapsed=)([\d.]+) s",
            "CUDA graphs captured",
        ),
        pattern("http", r"Uvicorn running on (\S+)", "HTTP server up (warming up)"),
        pattern("ready", r"The server is fired up and ready to roll", "ready to roll"),
    )
    fatal = FATAL_COMMON + (
        (re.compile(r"Received sigquit from a child process"), "a scheduler process died"),
    )

    def apply(self, facts: BootFacts, name: str, m: re.Match) -> None:
        if name == "weights":
            if m.group(1):
                facts.load_seconds = number(m.group(1))
            facts.weights_gib = number(m.group(2))
        elif name == "kv_tokens" and facts.kv_pool_tokens is None:
            facts.kv_pool_tokens = int(m.group(1))
        elif name == "capacity":
            facts.kv_pool_tokens = int(m.group(1))  # the scheduler's figure is the usable capacity
            ctx = re.search(r"context_len=(\d+)", m.string)
            if ctx:
                facts.kv_pool_context = int(ctx.group(1))
            running = re.search(r"max_running_requests=(\d+)", m.string)
            if running:
                facts.max_concurrency = float(running.group(1))
        elif name == "graphs":
            facts.graph_capture_seconds = number(m.group(1))

    def command(self, python: str = "python3") -> tuple[str, ...]:
        return ("python3", "-m", "sglang.launch_server")

    def probes(self, plan: LanePlan) -> list[Probe]:
        # /health turns 200 only after warmup (>= 0.5); it runs a 1-token generation, so poll it only at boot.
        return [Probe("/health"), Probe("/v1/models")]

    def launch(self, plan: LanePlan, nodes: list[NodeSpec], python: str = "python3") -> list[NodeLaunch]:
        e = plan.engine
        head = nodes[0].address  # the head's fabric address (cluster.head_address is the client's)
        base = [
            *self.command(python),
            "--model-path",
            plan.model_path,
            "--host",
            "0.0.0.0",
            "--port",
            str(e.port),
        ]
        base += parallel_flags(plan, self.kind_facts)
        if not model_flags_present(plan, "--served-model-name"):
            base += ["--served-model-name", plan.served_name]
        base += e.argv()
        out = []
        for rank, node in enumerate(nodes):
            extra: list[str] = []
            if len(nodes) > 1:
                extra = ["--nnodes", str(len(nodes)), "--node-rank", str(rank)]
                if not model_flags_present(plan, "--dist-init-addr", "--nccl-init-addr"):
                    extra += ["--dist-init-addr", f"{head}:{DIST_INIT_PORT}"]
            out.append(
                NodeLaunch(
                    node.name,
                    rank,
                    tuple(base + extra),
                    env_tuple(plan, {"SGLANG_HOST_IP": node.address}, SGLANG_DEFAULT_ENV, node.name),
                    serves_http=rank == 0,
                )
            )
        return out
