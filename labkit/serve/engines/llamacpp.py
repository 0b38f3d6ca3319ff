"""llama-cpp-python's OpenAI server: one node, ready when /v1/models answers (weights load before bind)."""

from __future__ import annotations

import re

from labkit.recipe import LanePlan
from labkit.serve.engines.base import (
    BootFacts,
    Engine,
    NodeLaunch,
    NodeSpec,
    Probe,
    check_nodes,
    env_tuple,
    pattern,
)

# `python -m llama_cpp.server` (llama-cpp-python 0.3) flags commonly set or swept, each listed by its real
# --help (0.3.36); with every flag launch() adds. These are llama-cpp-python's snake_case names, not the C++
# llama-server's (--n_ctx, not -c/--ctx-size) (docs/engines.md, "Known flags and the sweep flag check").
LLAMACPP_KNOWN_FLAGS = frozenset(
    {
        # context, batching and threads
        "--n_ctx", "--n_batch", "--n_ubatch", "--n_threads", "--n_threads_batch", "--seed",
        # offload and memory
        "--n_gpu_layers", "--split_mode", "--main_gpu", "--tensor_split", "--offload_kqv", "--flash_attn",
        "--use_mmap", "--use_mlock", "--type_k", "--type_v",
        # rope
        "--rope_scaling_type", "--rope_freq_base", "--rope_freq_scale",
        # speculative decoding and caching
        "--draft_model", "--draft_model_num_pred_tokens", "--cache", "--cache_type", "--cache_size",
        # model and chat
        "--model", "--model_alias", "--chat_format", "--hf_pretrained_model_name_or_path", "--lora_path",
        "--verbose",
        # server (labkit adds --model, --host, --port, --model_alias, --interrupt_requests: launch)
        "--host", "--port", "--api_key", "--interrupt_requests", "--disable_ping_events", "--config_file",
    }
)  # fmt: skip


class LlamaCpp(Engine):
    kind = "llamacpp"
    ready_pattern = "ready"
    package = "llama_cpp"
    known_flags = LLAMACPP_KNOWN_FLAGS
    patterns = (
        pattern("load_start", r"llama_model_loader: loaded meta data", "reading GGUF"),
        pattern("n_ctx", r"n_ctx\s+=\s+(\d+)", "context sized"),
        pattern(
            "kv_tokens", r"llama_kv_cache\w*:\s+size =\s+([\d.]+) MiB \(\s*(\d+) cells", "KV cache allocated"
        ),
        pattern("ready", r"Uvicorn running on (\S+)", "HTTP server up"),
    )

    def apply(self, facts: BootFacts, name: str, m: re.Match) -> None:
        if name == "n_ctx":
            facts.kv_pool_context = int(m.group(1))
        elif name == "kv_tokens":
            facts.kv_pool_tokens = int(m.group(2))

    def kv_tokens(self, name: str, m: re.Match) -> int:
        return int(m.group(2))  # "( 16384 cells, ...)": the size in MiB comes first

    def command(self, python: str = "python3") -> tuple[str, ...]:
        return (python, "-m", "llama_cpp.server")

    def probes(self, plan: LanePlan) -> list[Probe]:
        # No /health; /v1/models takes the model lock, so it is polled only during boot.
        return [Probe("/v1/models")]

    def launch(self, plan: LanePlan, nodes: list[NodeSpec], python: str = "python3") -> list[NodeLaunch]:
        check_nodes(plan, nodes, self.kind_facts)
        argv = [
            *self.command(python),
            "--model",
            plan.model_path,
            "--host",
            nodes[0].client_address,
            "--port",
            str(plan.engine.port),
        ]
        if plan.engine.arg("--model_alias") is None:
            argv += ["--model_alias", plan.served_name]
        if plan.engine.arg("--interrupt_requests") is None:
            argv += ["--interrupt_requests", "False"]  # else any request truncates a running stream
        argv += plan.engine.argv()
        return [NodeLaunch(nodes[0].name, 0, tuple(argv), env_tuple(plan, {}), serves_http=True)]
