"""OpenAI-compatible request parsing and response shapes (as vLLM 0.33 sends them), pre-rendered for speed.

A stream's per-chunk JSON is cut into a fixed prefix and suffix once per request; each chunk then costs one
bytes concatenation. Usage objects follow vLLM: {prompt_tokens, total_tokens, completion_tokens,
prompt_tokens_details: {cached_tokens}} (details only when `prompt_tokens_details` is on); a request's own
`metrics` ride on the final usage chunk of a stream and at the top of a JSON answer, as vLLM sends them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from labkit.sim import tokenizer
from labkit.sim.config import SimConfig
from labkit.sim.speculation import request_content


class ApiError(Exception):
    """An HTTP error answer with an OpenAI-style error body."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind

    def body(self) -> bytes:
        return json.dumps(
            {
                "object": "error",
                "message": self.message,
                "type": self.kind,
                "param": None,
                "code": self.status,
            }
        ).encode()


@dataclass
class GenRequest:
    endpoint: str  # "chat" | "completions"
    ids: list[int]
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    content: str = ""  # the prompt content category its header names (speculation.py); "": the default


def _int_field(data: dict, key: str, default: int | None, lo: int) -> int | None:
    v = data.get(key, default)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise ApiError(400, f"{key} must be an integer >= {lo}, got {v!r}")
    return v


def _json_object(body: bytes) -> dict:
    """A request body as a JSON object, or ApiError(400) as vLLM answers malformed bodies."""
    try:
        data = json.loads(body or b"null")
    except ValueError as e:
        raise ApiError(400, f"request body is not valid JSON: {e}")
    if not isinstance(data, dict):
        raise ApiError(400, "request body must be a JSON object")
    return data


def parse_generation(cfg: SimConfig, endpoint: str, body: bytes) -> GenRequest:
    """Validate a chat/completions body the way vLLM does; ApiError(400/404) otherwise."""
    data = _json_object(body)
    model = data.get("model")
    if model is not None and model != cfg.model_name:
        raise ApiError(404, f"The model `{model}` does not exist.", "NotFoundError")
    try:
        if endpoint == "chat":
            ids = tokenizer.encode_chat(data.get("messages"), bool(data.get("add_generation_prompt", True)))
        else:
            if "prompt" not in data:
                raise ApiError(400, "prompt is required")
            ids = tokenizer.encode_prompt(data["prompt"], bool(data.get("add_special_tokens", True)))
    except tokenizer.TokenizeError as e:
        raise ApiError(400, str(e))
    n = _int_field(data, "n", 1, 1)
    if n != 1:
        raise ApiError(400, "the simulator supports n=1 only")
    p = len(ids)
    if p == 0:
        raise ApiError(400, "the prompt is empty")
    room = cfg.max_model_len - p
    if room < 1:
        raise ApiError(
            400,
            f"This model's maximum context length is {cfg.max_model_len} tokens. However, your "
            f"request has {p} input tokens. Please reduce the length of the input messages.",
        )
    max_tokens = _int_field(data, "max_completion_tokens", None, 1) if endpoint == "chat" else None
    if max_tokens is None:
        max_tokens = _int_field(data, "max_tokens", None if endpoint == "chat" else 16, 1)
    if max_tokens is None:
        max_tokens = room
    if max_tokens > room:
        raise ApiError(
            400,
            f"'max_tokens' is too large: {max_tokens}. This model's maximum context length is "
            f"{cfg.max_model_len} tokens and your request has {p} input tokens "
            f"({max_tokens} > {cfg.max_model_len} - {p}).",
        )
    min_tokens = _int_field(data, "min_tokens", 0, 0) or 0
    if min_tokens > max_tokens:
        raise ApiError(
            400, f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}."
        )
    stream = bool(data.get("stream", False))
    opts = data.get("stream_options")
    if opts is not None and not stream:
        raise ApiError(400, "Stream options can only be defined when `stream=True`.")
    opts = opts or {}
    if not isinstance(opts, dict):
        raise ApiError(400, "stream_options must be an object")
    include = bool(opts.get("include_usage", False))
    continuous = bool(opts.get("continuous_usage_stats", False))
    if cfg.flavor == "vllm":
        continuous = continuous and include  # vLLM: continuous usage only together with include_usage
    return GenRequest(
        endpoint,
        ids,
        max_tokens,
        min_tokens,
        bool(data.get("ignore_eos", False)),
        stream,
        include,
        continuous,
        request_content(endpoint, data),
    )


def usage(cfg: SimConfig, prompt: int, completion: int, cached: int) -> dict[str, Any]:
    u: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
    }
    if cfg.prompt_tokens_details:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return u


class StreamRenderer:
    """Pre-rendered SSE events for one streamed request."""

    def __init__(
        self,
        cfg: SimConfig,
        endpoint: str,
        req_id: str,
        created: int,
        prompt: int,
        cached: int,
        continuous: bool,
    ):
        self.cfg, self.prompt, self.cached, self.continuous = cfg, prompt, cached, continuous
        self.endpoint = endpoint
        head = {
            "id": req_id,
            "object": "chat.completion.chunk" if endpoint == "chat" else "text_completion",
            "created": created,
            "model": cfg.model_name,
        }
        self.head = json.dumps(head)[:-1]  # '{"id": ..., "model": "..."' without the closing brace
        if endpoint == "chat":
            pre = self.head + ', "choices": [{"index": 0, "delta": {"content": "'
            self.mid_open = '"}, "logprobs": null, "finish_reason": '
        else:
            pre = self.head + ', "choices": [{"index": 0, "text": "'
            self.mid_open = '", "logprobs": null, "finish_reason": '
        self.pre = b"data: " + pre.encode()
        self.open_tail = (self.mid_open + 'null, "stop_reason": null}]').encode()

    def _usage_tail(self, completion: int) -> bytes:
        if not self.continuous:
            return b"}\n\n"
        return b', "usage": {"prompt_tokens": %d, "total_tokens": %d, "completion_tokens": %d}}\n\n' % (
            self.prompt,
            self.prompt + completion,
            completion,
        )

    def role(self) -> bytes:
        """vLLM chat's role-only prelude, sent just before the first token chunk."""
        body = (
            self.head + ', "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, '
            '"logprobs": null, "finish_reason": null}]'
        )
        return b"data: " + body.encode() + self._usage_tail(0)

    def tokens(self, text: bytes, completion: int) -> bytes:
        """A chunk carrying generated text (already JSON-escaped bytes)."""
        return self.pre + text + self.open_tail + self._usage_tail(completion)

    def last(self, text: bytes, completion: int, reason: str) -> bytes:
        tail = (self.mid_open + f'"{reason}", "stop_reason": null}}]').encode()
        return self.pre + text + tail + self._usage_tail(completion)

    def usage_chunk(self, completion: int, metrics: dict | None = None) -> bytes:
        """The final usage chunk; vLLM puts a request's own `metrics` here (labkit/sim/truth.py)."""
        extra = "" if metrics is None else ', "metrics": ' + json.dumps(metrics)
        body = (
            self.head
            + ', "choices": [], "usage": '
            + json.dumps(usage(self.cfg, self.prompt, completion, self.cached))
            + extra
            + "}"
        )
        return b"data: " + body.encode() + b"\n\n"


def full_response(
    cfg: SimConfig,
    endpoint: str,
    req_id: str,
    created: int,
    text: str,
    reason: str,
    prompt: int,
    completion: int,
    cached: int,
    metrics: dict | None = None,
) -> bytes:
    if endpoint == "chat":
        choice = {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": text,
                "refusal": None,
                "tool_calls": [],
                "reasoning_content": None,
            },
            "logprobs": None,
            "finish_reason": reason,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}
        obj = "text_completion"
    body = {
        "id": req_id,
        "object": obj,
        "created": created,
        "model": cfg.model_name,
        "choices": [choice],
        "usage": usage(cfg, prompt, completion, cached),
    }
    if metrics is not None:
        body["metrics"] = metrics
    return json.dumps(body).encode()


def models(cfg: SimConfig, created: int) -> bytes:
    owner = "vllm" if cfg.flavor == "vllm" else "sglang"
    return json.dumps(
        {
            "object": "list",
            "data": [
                {
                    "id": cfg.model_name,
                    "object": "model",
                    "created": created,
                    "owned_by": owner,
                    "root": cfg.model_path,
                    "parent": None,
                    "max_model_len": cfg.max_model_len,
                }
            ],
        }
    ).encode()


def tokenize(cfg: SimConfig, body: bytes) -> bytes:
    """vLLM /tokenize: {"prompt": ...} or {"messages": [...]} -> {"count", "max_model_len", "tokens"}."""
    data = _json_object(body)
    try:
        if "messages" in data:
            ids = tokenizer.encode_chat(data["messages"], bool(data.get("add_generation_prompt", True)))
        elif "prompt" in data:
            ids = tokenizer.encode_prompt(data["prompt"], bool(data.get("add_special_tokens", True)))
        else:
            raise ApiError(400, "expected 'prompt' or 'messages'")
    except tokenizer.TokenizeError as e:
        raise ApiError(400, str(e))
    return json.dumps(
        {"count": len(ids), "max_model_len": cfg.max_model_len, "tokens": ids, "token_strs": None}
    ).encode()
