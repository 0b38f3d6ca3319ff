"""The simulator's boot sequence: engine-style log lines on stderr with the configured delays and boot faults.

No socket exists during any of this (vLLM flavour) or before the scheduler summary (SGLang flavour);
labkit.sim.server listens afterwards.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime

from labkit.sim.config import SimConfig


class SimBootLog:
    """Writes engine-style log lines to stderr, flushed per line so a tailing harness sees them live."""

    def __init__(self, cfg: SimConfig, stream=None):
        self.cfg = cfg
        self.stream = stream or sys.stderr

    def line(self, msg: str, level: str = "INFO", where: str = "sim.py:1") -> None:
        now = datetime.now()
        if self.cfg.flavor == "vllm":
            text = f"{level} {now:%m-%d %H:%M:%S} [{where}] {msg}"
        else:
            text = f"[{now:%Y-%m-%d %H:%M:%S}] {msg}"
        self.stream.write(text + "\n")
        self.stream.flush()

    def uvicorn(self, msg: str) -> None:
        self.stream.write(f"INFO:     {msg}\n")
        self.stream.flush()


def _boot_crash(cfg: SimConfig, log: SimBootLog) -> None:
    """Fault: die during weight loading with the configured fatal line (exit status 1)."""
    time.sleep(cfg.boot_weights_s / 2)
    log.line(cfg.fault_boot_crash, "ERROR", "core.py:1010")
    log.line("EngineCore failed to start.", "ERROR", "core.py:1016")
    sys.exit(1)


def boot_vllm(cfg: SimConfig, log: SimBootLog) -> None:
    """vLLM 0.33 boot lines with the configured delays; no socket exists during any of this."""
    log.line(
        f"vLLM server version {cfg.version}, serving model {cfg.model_path} "
        f"(labkit.sim simulated engine{', preset ' + cfg.preset if cfg.preset else ''})",
        where="startup.py:38",
    )
    log.line(f"Starting to load model {cfg.model_path}...", where="gpu_model_runner.py:4979")
    if cfg.fault_boot_crash:
        _boot_crash(cfg, log)
    t0 = time.perf_counter()
    time.sleep(cfg.boot_weights_s)
    took = time.perf_counter() - t0
    log.line(f"Loading weights took {took:.2f} seconds", where="default_loader.py:507")
    log.line(
        f"Model loading took {round(cfg.weights_gib, 2)} GiB memory and {took + 0.01:.6f} seconds",
        where="gpu_model_runner.py:5089",
    )
    t1 = time.perf_counter()
    time.sleep(cfg.boot_init_s)
    kv_gib = cfg.kv_cache_tokens * 4096 / 2**30  # nominal bytes per token, for the log line only
    log.line(f"Available KV cache memory: {kv_gib:.2f} GiB", where="gpu_worker.py:773")
    conc = cfg.kv_cache_tokens / cfg.max_model_len
    if cfg.kv_log_form == "one-line":
        log.line(
            f"GPU KV cache size: {cfg.kv_cache_tokens:,} tokens, Maximum concurrency for "
            f"{cfg.max_model_len:,} tokens per request: {conc:.2f}x",
            where="kv_cache_utils.py:1136",
        )
    else:
        log.line(f"GPU KV cache size: {cfg.kv_cache_tokens:,} tokens", where="kv_cache_utils.py:1087")
        log.line(
            f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: {conc:.2f}x",
            where="kv_cache_utils.py:1091",
        )
    log.line(
        f"init engine (profile, create kv cache, warmup model) took {time.perf_counter() - t1:.2f} s",
        where="core.py:391",
    )
    log.line("Supported tasks: ['generate']", where="entry.py:135")


def boot_sglang_load(cfg: SimConfig, log: SimBootLog) -> None:
    """SGLang lines up to the scheduler summary (HTTP comes up after this, before warmup)."""
    log.line(
        f"server_args=ServerArgs(model_path='{cfg.model_path}', served_model_name='{cfg.model_name}', "
        f"simulated='labkit.sim {cfg.version}{' preset ' + cfg.preset if cfg.preset else ''}')"
    )
    avail = cfg.weights_gib + 20.0
    log.line(f"Load weight begin. avail mem={avail:.2f} GB")
    if cfg.fault_boot_crash:
        _boot_crash(cfg, log)
    t0 = time.perf_counter()
    time.sleep(cfg.boot_weights_s)
    log.line(
        f"Load weight end. elapsed={time.perf_counter() - t0:.2f} s, type=SimForCausalLM, "
        f"avail mem={avail - cfg.weights_gib:.2f} GB, mem usage={cfg.weights_gib:.2f} GB."
    )
    time.sleep(cfg.boot_init_s)
    kv_gb = cfg.kv_cache_tokens * 4096 / 1e9
    log.line(
        f"KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: {cfg.kv_cache_tokens}, "
        f"KV size: {kv_gb:.2f} GB"
    )
    log.line(
        f"max_total_num_tokens={cfg.kv_cache_tokens}, chunked_prefill_size={cfg.prefill_chunk_tokens or -1}, "
        f"max_prefill_tokens=16384, max_running_requests=256, context_len={cfg.max_model_len}, "
        f"available_gpu_mem=10.00 GB"
    )
