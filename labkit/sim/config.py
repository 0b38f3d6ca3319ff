"""Simulator settings: one flat dataclass, named presets, and `key=value` / TOML overrides.

Every number the simulator produces derives from these fields, so a test or a measurement-accuracy
check can state the truth it expects. Keys are flat (`fault_http500_request`, not `fault.http500`) so
`--set`, config files and presets all use the same names.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import random
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.errors import LabkitError
from labkit.measures import CONTENT
from labkit.sim.speculation import check_rates, content_field

FLAVORS = ("vllm", "sglang")
KV_LOG_FORMS = ("one-line", "two-line")


class SimConfigError(LabkitError):
    """A bad simulator setting: names the key (and the file or --set it came from)."""


def batch_beta(c1_tps: float, c2_agg_tps: float) -> float:
    """Batch slowdown beta such that two concurrent streams total `c2_agg_tps` when one alone runs at `c1_tps`.

    step_time(b) = step_time(1) * (1 + beta * (b - 1)), so per-stream rate at b=2 is c1 / (1 + beta).
    """
    return 2.0 * c1_tps / c2_agg_tps - 1.0


@dataclass
class SimConfig:
    """All simulator parameters. Rates are tokens/s; times are seconds; 0 means "off"/"same as warm"."""

    # identity
    flavor: str = "vllm"
    preset: str = ""
    model_name: str = "sim-model"
    model_path: str = "labkit/sim-model"
    engine_version: str = ""  # "" -> 0.33.0+labkit.sim (vllm) / 0.5.23+labkit.sim (sglang)
    host: str = "127.0.0.1"
    port: int = 8000
    seed: int = 0
    # capacity
    max_model_len: int = 131072
    kv_cache_tokens: int = 1_000_000
    block_size: int = 16
    # vLLM's cache_config_info: num_gpu_blocks (0: kv_cache_tokens // block_size); kv_cache_size_tokens shown
    # (builds before it was added lack the label); a hybrid layout's block_size label (0: block_size): vLLM
    # reports the smallest KV group's block size there, so num_gpu_blocks * block_size is no token count
    kv_gpu_blocks: int = 0
    kv_tokens_label: bool = True
    kv_hybrid_block_size: int = 0
    prefix_caching: bool = True
    prompt_tokens_details: bool = (
        True  # vLLM needs --enable-prompt-tokens-details for this; the sim defaults on
    )
    # timing
    prefill_tps: float = 5000.0
    prefill_chunk_tokens: int = 0  # 0: a prefill blocks other streams' decode steps until it ends
    decode_tps: float = 50.0  # per stream at c1, mean tokens/s (spec steps included)
    # relative SD of each generation request's decode rate: its steps run at rate x f, f ~ N(1, decode_noise)
    # from a stream seeded by (seed, request number), floored at 0.1; 0 = every request at the same rate
    decode_noise: float = 0.0
    batch_beta: float = 0.0  # step_time(b) = step_time(1) * (1 + beta*(b-1))
    cold_requests: int = 1  # the first N generation requests after boot are "cold"
    cold_decode_tps: float = 0.0  # 0: cold requests decode at decode_tps
    cold_prefill_tps: float = 0.0  # 0: cold requests prefill at prefill_tps
    # the first request after the engine sat idle (nothing running) for idle_after_s seconds prefills and decodes
    # idle_factor times slower, as a GPU whose clocks dropped while idle (0: off; docs/measurement.md, "Idle turns")
    idle_after_s: float = 0.0
    idle_factor: float = 1.0
    # decode slows with context: a request of P prompt tokens decodes 1 + decode_ctx_slope * P / 1000 times
    # slower (0: off; docs/measurement.md, "Context depth")
    decode_ctx_slope: float = 0.0
    eos_mean_tokens: float = 128.0  # mean natural length (geometric) without ignore_eos; 0: never EOS
    # speculative decoding
    spec_method: str = ""  # "" = off; e.g. "dspark", "mtp", "eagle3"
    spec_k: int = 0
    spec_accept: list[float] = field(default_factory=list)  # per-position acceptance, non-increasing, len K
    # per prompt content category (labkit/sim/speculation.py): the rates of a request whose prompt names it;
    # empty: spec_accept. Same rules as spec_accept
    spec_accept_prose: list[float] = field(default_factory=list)
    spec_accept_code: list[float] = field(default_factory=list)
    spec_accept_structured: list[float] = field(default_factory=list)
    spec_accept_chat: list[float] = field(default_factory=list)
    # boot
    boot_weights_s: float = 0.5
    boot_init_s: float = 0.3
    weights_gib: float = 110.85
    kv_log_form: str = "one-line"
    # ground truth detail: keep [target, actual, tokens] of every emission in /sim/requests (costs memory)
    record_chunks: bool = False
    sglang_warmup_s: float = 0.2  # sglang: HTTP is up but /health answers 503 for this long
    # fault injection (request numbers count generation requests since boot, from 1; 0 = off)
    fault_boot_crash: str = ""  # fatal log line; the process exits 1 during boot after printing it
    fault_http500_request: int = 0
    fault_exit_request: int = 0
    fault_exit_after_tokens: int = 0
    fault_stall_request: int = 0
    fault_stall_after_tokens: int = 0
    fault_hold_request: int = (
        0  # request n's chunks after fault_hold_from tokens are held back and written at once
    )
    fault_hold_from: int = (
        0  # ... when the chunk reaching fault_hold_until tokens is ready (0 = the last chunk)
    )
    fault_hold_until: int = 0
    fault_restart_request: int = 0  # counters start again from zero before request n, as after a restart
    # per-request figures in every response, as vLLM's --enable-per-request-metrics and
    # --per-request-spec-decode-metrics (none|summary|detailed) give them (labkit/sim/truth.py); requests beyond
    # max_num_seqs wait for a free slot (0 = no limit); request fault_loop_request's text repeats one word
    enable_per_request_metrics: bool = False
    per_request_spec_decode_metrics: str = "none"
    max_num_seqs: int = 0
    fault_loop_request: int = 0
    # the schedule (labkit/sim/scheduler.py), as vLLM's --max-num-batched-tokens: engine steps of at most this many
    # tokens (decodes first, then prefill chunks); a step lasts step_base_s + step_token_s x tokens + step_seq_s x
    # sequences, a slowed request's share longer (noise, idle, context, cold: StepScheduler.duration). Left at 0,
    # the three are derived from decode_tps, prefill_tps and batch_beta (step_costs). 0: the older per-request
    # schedule of labkit/sim/engine.py instead (docs/measurement.md, "The simulator's step scheduler")
    max_num_batched_tokens: int = 8192
    step_base_s: float = 0.0
    step_token_s: float = 0.0
    step_seq_s: float = 0.0
    # the roofline's stand-ins for a checkpoint and a device probe (docs/roofline.md, "The simulator"): the bytes
    # one stream's token reads at c1, and the memory bandwidth; b streams read (1 + batch_beta (b - 1)) times as
    # much per step (batch_beta above 1 counts as 1, as the schedule does). Both 0: no roofline
    roofline_bytes_per_token: float = 0.0
    memory_bandwidth: float = 0.0

    # ---- derived -------------------------------------------------------------------------------
    @property
    def version(self) -> str:
        if self.engine_version:
            return self.engine_version
        return "0.33.0+labkit.sim" if self.flavor == "vllm" else "0.5.23+labkit.sim"

    @property
    def spec_on(self) -> bool:
        return bool(self.spec_method) and self.spec_k > 0

    @property
    def mean_accepted(self) -> float:
        return sum(self.spec_accept) if self.spec_on else 0.0

    def step_time(self, batch: int, cold: bool, factor: float = 1.0) -> float:
        """Seconds per decode step for one stream when `batch` streams decode together; `factor` is the
        request's rate factor (`rate_factor`)."""
        rate = (self.cold_decode_tps if cold and self.cold_decode_tps > 0 else self.decode_tps) * factor
        return (1.0 + self.mean_accepted) / rate * (1.0 + self.batch_beta * (max(batch, 1) - 1))

    def rate_factor(self, index: int) -> float:
        """Generation request `index`'s decode-rate factor, 1 without decode_noise. Drawn from a stream of its
        own (seed, index), so it is reproducible and leaves the EOS and acceptance draws as they were."""
        if self.decode_noise <= 0:
            return 1.0
        return max(0.1, random.Random(f"decode_noise/{self.seed}/{index}").gauss(1.0, self.decode_noise))

    @property
    def step_mode(self) -> bool:
        """Engine steps with a token budget (labkit/sim/scheduler.py) instead of each request's own schedule."""
        return self.max_num_batched_tokens > 0

    @property
    def step_costs(self) -> tuple[float, float, float]:
        """(base, per token, per decode) seconds of one engine step (StepScheduler.duration): every token costs
        the token cost, a step that decodes the base once and the decode cost per decoding sequence. Each is the
        setting when set (> 0); derived, the token cost is 1/prefill_tps, so a prompt alone prefills at
        prefill_tps, and base and decode cost come from step_time, so one stream decodes at decode_tps (spec steps
        of 1 + spec_k tokens included) and b streams at decode_tps / (1 + batch_beta x (b - 1)) each, as in the
        per-request schedule (batch_beta above 1 counts as 1). The derived decode cost is a decode's share less
        its tokens' cost, below 0 when the tokens alone cost more than the share."""
        token = self.step_token_s or 1.0 / self.prefill_tps
        lone = self.step_time(1, False)
        tokens = (1 + (self.spec_k if self.spec_on else 0)) * token
        if self.step_base_s:
            return self.step_base_s, token, self.step_seq_s
        if self.step_seq_s:
            return max(0.0, lone - tokens - self.step_seq_s), token, self.step_seq_s
        share = lone * min(self.batch_beta, 1.0)
        return lone - share, token, share - tokens

    @property
    def kv_blocks(self) -> int:
        """KV blocks of the pool: kv_gpu_blocks, or kv_cache_tokens // block_size."""
        return self.kv_gpu_blocks or self.kv_cache_tokens // self.block_size

    def prefill_rate(self, cold: bool) -> float:
        return self.cold_prefill_tps if cold and self.cold_prefill_tps > 0 else self.prefill_tps

    def validate(self) -> SimConfig:
        def bad(key: str, msg: str) -> SimConfigError:
            return SimConfigError(f"sim setting {key}: {msg}")

        if self.flavor not in FLAVORS:
            raise bad("flavor", f"must be one of {', '.join(FLAVORS)}, got {self.flavor!r}")
        if self.kv_log_form not in KV_LOG_FORMS:
            raise bad("kv_log_form", f"must be one of {', '.join(KV_LOG_FORMS)}, got {self.kv_log_form!r}")
        for key in ("prefill_tps", "decode_tps"):
            if getattr(self, key) <= 0:
                raise bad(key, "must be > 0")
        for key in (
            "cold_decode_tps",
            "cold_prefill_tps",
            "idle_after_s",
            "decode_ctx_slope",
            "batch_beta",
            "decode_noise",
            "eos_mean_tokens",
            "boot_weights_s",
            "boot_init_s",
            "sglang_warmup_s",
            "weights_gib",
            "step_base_s",
            "step_token_s",
            "step_seq_s",
            "roofline_bytes_per_token",
            "memory_bandwidth",
        ):
            if getattr(self, key) < 0:
                raise bad(key, "must be >= 0")
        if bool(self.roofline_bytes_per_token) != bool(self.memory_bandwidth):
            raise bad("memory_bandwidth", "set with roofline_bytes_per_token, or neither")
        if self.idle_factor < 1:
            raise bad("idle_factor", "must be >= 1 (an idle engine is never faster)")
        for key in ("max_model_len", "kv_cache_tokens", "block_size"):
            if getattr(self, key) < 1:
                raise bad(key, "must be >= 1")
        if not 0 <= self.port <= 65535:
            raise bad("port", f"out of range: {self.port}")
        by_content = [key for key in map(content_field, CONTENT) if getattr(self, key)]
        if self.spec_method:
            if self.spec_k < 1:
                raise bad("spec_k", "must be >= 1 when spec_method is set")
            for key in ["spec_accept", *by_content]:
                problem = check_rates(key, getattr(self, key), self.spec_k)
                if problem:
                    raise bad(key, problem)
        elif by_content:
            raise bad(by_content[0], "only used with spec_method (speculation is off)")
        for key in (
            "fault_http500_request",
            "fault_exit_request",
            "fault_exit_after_tokens",
            "fault_stall_request",
            "fault_stall_after_tokens",
            "fault_hold_request",
            "fault_hold_from",
            "fault_hold_until",
            "fault_restart_request",
            "cold_requests",
            "prefill_chunk_tokens",
            "kv_gpu_blocks",
            "kv_hybrid_block_size",
            "max_num_seqs",
            "fault_loop_request",
            "max_num_batched_tokens",
        ):
            if getattr(self, key) < 0:
                raise bad(key, "must be >= 0")
        if self.step_mode:
            self._validate_steps(bad)
        if self.per_request_spec_decode_metrics not in ("none", "summary", "detailed"):
            raise bad("per_request_spec_decode_metrics", "must be none, summary or detailed")
        if self.per_request_spec_decode_metrics != "none" and not self.spec_on:
            raise bad("per_request_spec_decode_metrics", "needs speculation (spec_method), as vLLM does")
        return self

    def _validate_steps(self, bad: Callable[[str, str], SimConfigError]) -> None:
        """Step mode needs a KV pool that holds one request of max_model_len, as vLLM refuses to start otherwise
        (prefill_chunk_tokens, which presets set, is unused there: the budget is the chunk)."""
        mode = f"with max_num_batched_tokens={self.max_num_batched_tokens} (step mode)"
        if self.kv_blocks * self.block_size < self.max_model_len:
            raise bad(
                "kv_cache_tokens",
                f"{mode} the KV pool ({self.kv_blocks} blocks of {self.block_size}) must hold one request of "
                f"max_model_len={self.max_model_len} tokens, as vLLM refuses to start otherwise",
            )


FIELDS = {f.name: f for f in dataclasses.fields(SimConfig)}

# Stock DeepSeek-V4.1-Flash on vLLM, four Sparks, from the lab note (2026-10-23). Simulated, not measured.
_DSV41 = dict(
    model_name="sim-dsv41",
    model_path="labkit/sim-dsv41",
    max_model_len=131072,
    weights_gib=110.85,
    boot_weights_s=1.5,
    boot_init_s=1.0,
    prefill_chunk_tokens=4096,
    max_num_batched_tokens=4096,  # the lab's --max-num-batched-tokens (the note's prefill levers)
)

PRESETS: dict[str, dict[str, Any]] = {
    "dsv41-stock": dict(
        _DSV41,
        decode_tps=29.7,
        cold_decode_tps=20.0,
        batch_beta=batch_beta(29.7, 45.6),
        prefill_tps=750.0,
        kv_cache_tokens=8_726_823,
    ),
    "dsv41-stock-dspark": dict(
        _DSV41,
        decode_tps=52.9,
        cold_decode_tps=25.5,
        batch_beta=batch_beta(52.9, 66.4),
        prefill_tps=605.0,
        kv_cache_tokens=7_070_000,
        spec_method="dspark",
        spec_k=5,
        # "4.79 of 5" read as accepted drafts per step, bonus excluded (tau = 5.79): sum of the rates.
        spec_accept=[0.995, 0.985, 0.96, 0.935, 0.915],
        # by prompt content: tau 1.9 on prose against 5.93 on code, the spread of the public DeepSeek-V4.1-Flash
        # figures (1.88 to 5.92); made up, not measured (docs/measurement.md, "Prompt content")
        spec_accept_prose=[0.5, 0.2, 0.1, 0.06, 0.04],
        spec_accept_code=[0.995, 0.99, 0.985, 0.98, 0.975],
        spec_accept_structured=[0.98, 0.95, 0.9, 0.85, 0.8],
        spec_accept_chat=[0.7, 0.45, 0.3, 0.2, 0.15],
    ),
    # Fast and small for tests: boots in ~0.1 s, 200 t/s decode, 20k t/s prefill.
    "test": dict(
        model_name="sim-test",
        model_path="labkit/sim-test",
        max_model_len=8192,
        kv_cache_tokens=100_000,
        decode_tps=200.0,
        prefill_tps=20_000.0,
        batch_beta=0.5,
        cold_requests=0,
        boot_weights_s=0.05,
        boot_init_s=0.05,
        weights_gib=1.0,
        sglang_warmup_s=0.05,
    ),
}


def parse_value(key: str, text: str) -> Any:
    """Convert a `--set` string to the type of field `key` (lists: JSON or comma-separated)."""
    if key not in FIELDS:
        hint = difflib.get_close_matches(key, FIELDS, n=3)
        more = f" (did you mean {', '.join(hint)}?)" if hint else ""
        raise SimConfigError(f"unknown sim setting {key!r}{more}; valid keys: {', '.join(FIELDS)}")
    kind = FIELDS[key].type
    try:
        if kind == "bool":
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true/false")
        if kind == "int":
            return int(text.replace("_", "").replace(",", ""))
        if kind == "float":
            return float(text)
        if kind == "list[float]":
            text = text.strip()
            if text.startswith("["):
                return [float(v) for v in json.loads(text)]
            return [float(v) for v in text.split(",") if v.strip()]
        return text
    except ValueError as e:
        raise SimConfigError(f"sim setting {key}: cannot read {text!r} as {kind}: {e}")


def _coerce(key: str, value: Any, where: str) -> Any:
    """Check a value from a TOML/JSON file or preset against the field's type."""
    if key not in FIELDS:
        hint = difflib.get_close_matches(key, FIELDS, n=3)
        more = f" (did you mean {', '.join(hint)}?)" if hint else ""
        raise SimConfigError(f"{where}: unknown sim setting {key!r}{more}")
    kind = str(FIELDS[key].type)  # the annotation as text (this module defers annotations)
    ok = {
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "list[float]": lambda v: isinstance(v, list) and all(isinstance(x, int | float) for x in v),
    }[kind]
    if not ok(value):
        raise SimConfigError(f"{where}: sim setting {key}: expected {kind}, got {value!r}")
    return (
        [float(x) for x in value] if kind == "list[float]" else (float(value) if kind == "float" else value)
    )


def load_file(path: str | Path) -> dict[str, Any]:
    """Settings from a TOML (.toml) or JSON file: a flat table of keys (or under a [sim] table)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise SimConfigError(f"{p}: cannot read sim config: {e}")
    try:
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as e:
        raise SimConfigError(f"{p}: not valid {'JSON' if p.suffix == '.json' else 'TOML'}: {e}")
    if isinstance(data.get("sim"), dict):
        data = data["sim"]
    return {k: _coerce(k, v, str(p)) for k, v in data.items()}


def build_config(
    preset: str | None = None, file: str | Path | None = None, sets: list[str] | None = None, **overrides: Any
) -> SimConfig:
    """Preset, then file, then `key=value` strings, then keyword overrides (None values skipped); validated.

    Raises SimConfigError naming the key for anything unknown or ill-typed.
    """
    values: dict[str, Any] = {}
    if preset:
        if preset not in PRESETS:
            raise SimConfigError(f"unknown sim preset {preset!r}; presets: {', '.join(PRESETS)}")
        values.update(PRESETS[preset])
        values["preset"] = preset
    if file:
        values.update(load_file(file))
    for item in sets or []:
        key, sep, text = item.partition("=")
        key = key.strip().replace("-", "_").replace(".", "_")
        if not sep or not key:
            raise SimConfigError(f"--set expects key=value, got {item!r}")
        values[key] = parse_value(key, text)
    for key, value in overrides.items():
        if value is not None:
            values[key] = _coerce(key, value, "option")
    return SimConfig(**values).validate()
