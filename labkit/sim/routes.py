"""Server state shared by all connections (`App`) and the simple, synchronous routes it answers.

Generation routes stream and live in labkit.sim.generate; everything else is answered here in one call.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict
from urllib.parse import parse_qs

from labkit.sim import openai
from labkit.sim.boot import SimBootLog
from labkit.sim.config import SimConfig
from labkit.sim.engine import SimEngine
from labkit.sim.metrics import render, request_states
from labkit.sim.scheduler import StepScheduler
from labkit.sim.steps import StepLoop


class App:
    """Server state shared by all connections: config, engine, readiness, fault counters."""

    def __init__(self, cfg: SimConfig, log: SimBootLog):
        self.cfg = cfg
        self.log = log
        self.engine = SimEngine(cfg)
        self.wall_boot = time.time()
        self.created = int(self.wall_boot)
        self.ready = cfg.flavor == "vllm"
        self.held = 0  # requests waiting for a slot (max_num_seqs), not yet admitted
        # step mode: the engine loop and its scheduler (labkit.sim.steps, labkit.sim.scheduler)
        self.steps = (
            StepLoop(StepScheduler(self.engine), lambda text: log.line(text, "ERROR"))
            if cfg.step_mode
            else None
        )
        self._ids = 0

    @property
    def sched(self) -> StepScheduler | None:
        return self.steps.sched if self.steps is not None else None

    def new_id(self, endpoint: str) -> str:
        self._ids += 1
        return f"{'chatcmpl' if endpoint == 'chat' else 'cmpl'}-sim{self._ids:06d}{uuid.uuid4().hex[:8]}"

    # simple, synchronous routes -> (status, content type, body)
    def simple(self, method: str, path: str, query: str, body: bytes) -> tuple[int, str, bytes] | None:
        cfg, eng = self.cfg, self.engine
        js = "application/json"
        if path == "/health" and method == "GET":
            return (200, js, b"") if self.ready else (503, js, b"")
        if path == "/v1/models" and method == "GET":
            return 200, js, openai.models(cfg, self.created)
        if path == "/version" and method == "GET":
            return (
                200,
                js,
                json.dumps(
                    {
                        "version": cfg.version,
                        "simulated": True,
                        "engine": "labkit.sim",
                        "flavor": cfg.flavor,
                        "preset": cfg.preset or None,
                    }
                ).encode(),
            )
        if path == "/metrics" and method == "GET":
            return (
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                render(eng, self.wall_boot, self.held, self.sched).encode(),
            )
        if path == "/tokenize" and method == "POST":
            return 200, js, openai.tokenize(cfg, body)
        if path == "/sim/requests" and method == "GET":
            since = int(parse_qs(query).get("since", ["0"])[0])
            recs = [r.to_dict() for r in eng.records if r.index > since]
            now = time.perf_counter()
            running, waiting = request_states(eng, now, self.sched)
            waiting += self.held
            return (
                200,
                js,
                json.dumps(
                    {
                        "clock": "time.perf_counter (CLOCK_MONOTONIC)",
                        "boot": eng.t_boot,
                        "now": now,
                        "running": running,
                        "waiting": waiting,
                        "config": asdict(cfg),
                        "requests": recs,
                    }
                ).encode(),
            )
        if cfg.flavor == "vllm" and path == "/reset_prefix_cache" and method == "POST":
            eng.flush_cache()
            return 200, js, b""
        if cfg.flavor == "sglang":
            if path in ("/server_info", "/get_server_info") and method == "GET":
                return 200, js, json.dumps(self.server_info()).encode()
            if path in ("/model_info", "/get_model_info") and method == "GET":
                return (
                    200,
                    js,
                    json.dumps(
                        {
                            "model_path": cfg.model_path,
                            "served_model_name": cfg.model_name,
                            "is_generation": True,
                            "simulated": True,
                        }
                    ).encode(),
                )
            if path == "/flush_cache" and method in ("GET", "POST"):
                if eng.flush_cache():
                    return 200, "text/plain", b"Cache flushed.\n"
                return 400, "text/plain", b"Cache not flushed. Please check if the server is idle.\n"
        return None

    def server_info(self) -> dict:
        cfg, eng = self.cfg, self.engine
        state: dict = {
            "memory_usage": {
                "weight": cfg.weights_gib,
                "kvcache": cfg.kv_cache_tokens * 4096 / 1e9,
                "token_capacity": cfg.kv_cache_tokens,
                "graph": 0.5,
            },
            "last_gen_throughput": cfg.decode_tps,
        }
        if cfg.spec_on:
            state["avg_spec_accept_length"] = eng.avg_spec_accept_length
        return {
            "model_path": cfg.model_path,
            "served_model_name": cfg.model_name,
            "host": cfg.host,
            "port": cfg.port,
            "speculative_algorithm": cfg.spec_method.upper() or None,
            "speculative_num_draft_tokens": cfg.spec_k + 1 if cfg.spec_on else None,
            "max_total_num_tokens": cfg.kv_cache_tokens,
            "max_req_input_len": cfg.max_model_len - 1,
            "version": cfg.version,
            "simulated": True,
            "startup_time": self.wall_boot,
            "internal_states": [state],
        }
