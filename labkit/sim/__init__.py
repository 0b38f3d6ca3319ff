"""labkit.sim — a simulated LLM engine: a real OpenAI-compatible HTTP server whose true speeds are known.

Used as the embedded default lane (recipes/sim), by the notebooks without a GPU cluster, and as the oracle for
labkit's own measurement-accuracy tests. Everything it produces is labelled simulated (version string
`0.33.0+labkit.sim`, boot banner, /version `"simulated": true`, `vllm:cache_config_info{simulated="true"}`).

Command line (stable; the serving layer launches exactly this form as a background process):

    python -m labkit.sim [--flavor vllm|sglang] [--preset NAME] [--config FILE] [--set KEY=VALUE ...]
                         [--decode-tps X ...] [--host H] [--port P] [--model-name N] [--list]
    labkit sim ...        (same flags)

Precedence: preset < --config file (TOML/JSON, flat keys, optionally under [sim]) < --set < --flavor/--host/
--port/--model-name. One --set takes one or several KEY=VALUE (a recipe's engine.args "--set" may be a list).
Every setting also has its own flag (`--decode-tps 40` is `--set decode_tps=40`, in command-line order with
the --set items; not spec_accept_<category>, set with --set or --config only: labkit/sim/cli.py), so a sweep can walk a setting as it walks an engine flag. Unknown or ill-typed keys exit 1 with the key named. `--port 0` picks a free port (printed
in the `Starting vLLM server on http://H:P` / `Uvicorn running on http://H:P` line). `--list` prints all keys.
Keys and meanings: labkit/sim/config.py (SimConfig). Presets: `dsv41-stock`, `dsv41-stock-dspark`, `test`.

Boot (stderr): vLLM flavour prints the 0.33 lines (version banner, `Loading weights took X seconds`,
`Model loading took X GiB memory and Y seconds`, `GPU KV cache size: N tokens, Maximum concurrency for W tokens
per request: Z.ZZx` or the two-line form with kv_log_form=two-line, `init engine (...) took X s`,
`Starting vLLM server on http://H:P`, `Application startup complete.`) and does not listen at all until then
(connections are refused). SGLang flavour prints `Load weight end. elapsed=...`, `KV Cache is allocated. ...
#tokens: N`, `max_total_num_tokens=N`, listens at `Uvicorn running on ...`, answers /health 503 during
sglang_warmup_s, then prints `The server is fired up and ready to roll!`.

Endpoints: GET /health, /version, /v1/models, /metrics; POST /v1/completions, /v1/chat/completions (stream and
non-stream), /tokenize; vLLM: POST /reset_prefix_cache; SGLang: GET /server_info (/get_server_info),
/model_info, GET|POST /flush_cache (400 unless idle). Generation honours max_tokens (completions default 16,
chat default: the rest of the context), max_completion_tokens, min_tokens, ignore_eos, n=1,
stream_options.include_usage and continuous_usage_stats (vLLM flavour: only together with include_usage; SGLang:
independent). Streams: chat sends a role-only prelude with the first token; each engine step is one SSE event;
the last token event carries finish_reason; then the usage chunk (choices=[], usage with
prompt_tokens_details.cached_tokens) if requested; then `data: [DONE]`. Without ignore_eos a seeded EOS
(mean eos_mean_tokens) may end the request early with finish_reason "stop" (the EOS token is counted).

Timing, prefix cache and speculative decoding: see labkit/sim/engine.py (engine steps by default, below; with
max_num_batched_tokens=0 each request has its own schedule; the schedule is absolute, TTFT = prefill
of the uncached prompt tokens, a repeated prefix is served from chained 16-token block hashes, a nonce at the
start of a prompt defeats the cache, one at the end does not) and labkit/sim/speculation.py (a prompt that
starts with labkit's content header `[<nonce> <category>] ` draws its acceptance from spec_accept_<category>
when set, else spec_accept; docs/measurement.md, "Prompt content"). Tokenizer: labkit/sim/tokenizer.py (one token per
word or punctuation mark, words split every 8 characters, chat template adds 3 per message + 3).

Ground truth: GET /sim/requests[?since=N] -> {"clock", "boot", "now", "running", "waiting", "config", "requests":
[...]}, running/waiting being the gauges' values at "now" (the same as /metrics exports), one entry per
generation request with index (1-based since boot), id, endpoint, stream, cold, content (the category its
prompt header names, "" for none), prompt_tokens, cached_tokens,
max_tokens, target_tokens, eos_at, completion_tokens, steps (decode steps after the prefill token), drafts,
draft_tokens, accepted, accepted_per_pos, chunks, t_arrival, t_prefill_start, t_prefill_end (scheduled),
t_first / t_last (actual write times of the first and last token), t_first_target / t_last_target, max_lateness,
finish_reason, status (running|finished|aborted|stalled|exited), t_scheduled / prefill_chunks / preemptions
(step mode: the start of the first step that ran it, the steps its prefill took, how often it was preempted;
None / 0 otherwise), true_decode_tps = (N-1)/(t_last-t_first) and
true_prefill_tps = (prompt-cached)/(prefill time), rate_factor (its decode rate is decode_tps x this; 1 unless
decode_noise) and scheduled_decode_tps = (N-1)/(t_last_target-t_first_target). With record_chunks=true also
emissions:
[[target, actual, tokens], ...]. Times are time.perf_counter() seconds = CLOCK_MONOTONIC on Linux, directly
comparable with a client's perf_counter on the same host.

Noise: decode_noise=s gives each generation request its own decode-rate factor f ~ N(1, s) (floored at 0.1),
drawn from a stream seeded by (seed, request number): reproducible, mean rate unchanged, relative SD s.

Gauges: vllm:num_requests_running / vllm:num_requests_waiting and sglang:num_running_reqs /
sglang:num_queue_reqs are exact at the scrape: waiting = admitted, prefill not started, or held for a free slot
(max_num_seqs=n: at most n requests run at once, the others wait in arrival order); running = the others.
With steps both are the scheduler's lists and vllm:kv_cache_usage_perc (sglang:token_usage) is the
share of KV blocks running requests hold (per-request schedule: the prefix cache's fill).

Schedule: engine steps when max_num_batched_tokens=B > 0 (flag `--max-num-batched-tokens B` as vLLM spells it,
with `--max-num-seqs N`, so one sweep command runs on the sim and on vLLM; the default is 8192, the dsv41
presets 4096 as the lab's lanes), like vLLM's V1 scheduler, simplified (labkit/sim/scheduler.py, the
pure core; labkit/sim/steps.py, the loop that runs it in the server). B = 0 is the per-request schedule (labkit/sim/engine.py), which cannot show prefill and decode
slowing each other:
- each step gives every decoding request one token (with speculation: it verifies K drafts, 1 + K tokens of B,
  and emits 1 + accepted), then fills the rest of B with prefill chunks: running requests first, then the
  waiting queue in arrival order while fewer than max_num_seqs run and the KV blocks of the whole prompt are
  free. A prompt longer than the budget left takes several steps; its first token is sent at the end of the step
  that completes it. Prefix-cache hits shorten the prefill.
- a step lasts step_token_s x its tokens, plus step_base_s + step_seq_s x decodes when it decodes. Unset, they
  are derived: step_token_s = 1/prefill_tps, so a prompt alone prefills at prefill_tps; step_base_s and step_seq_s
  such that one stream alone decodes at decode_tps (spec steps included) and b streams at decode_tps / (1 +
  batch_beta (b - 1)) each: the per-request schedule's figures. A long prompt arriving while streams decode
  stretches each of their gaps to a full step of B tokens until it is in.
- decode_noise, the idle penalty, decode_ctx_slope and the cold rates slow a request's share of a step (and the
  base by the slowest decode's factor), so a request alone runs exactly as in the per-request schedule.
- KV: kv_gpu_blocks (or kv_cache_tokens // block_size) blocks; a decode after g tokens needs ceil((P + g +
  drafts) / block_size). When a block is missing, the most recently admitted running request is preempted
  (recompute: blocks freed, back to the front of the queue, prompt and tokens prefilled again), counted in
  vllm:num_preemptions_total (exported with steps only). The pool must hold max_model_len tokens.
Truth: t_scheduled (queue time = t_scheduled - t_arrival), t_prefill_start = t_scheduled, t_prefill_end =
t_first_target = the end of the step that completed the prefill, every emission's [target, actual, tokens] with
record_chunks (targets chain step ends, actual is when the loop completed the step, just before the write).
A request joins the first step that starts after it arrived (on an idle engine, a step starts at its arrival).
Every fault works with steps; a request whose client goes away, or that stalls, leaves the scheduler at once
(its slot and blocks freed), queued or running. prefill_chunk_tokens applies to the per-request schedule only
(B is the chunk). Simplified: a prefix shared by running requests holds blocks in each; the prefix cache is
looked up at arrival; no watermark, no swap, no per-request priority.

Per-request metrics: enable_per_request_metrics=true (flag `--enable-per-request-metrics`, as vLLM spells it)
puts vLLM's `metrics` object on the final usage chunk of a stream and at the top of a JSON answer:
time_to_first_token_ms (prefill start to first token), queue_time_ms (arrival to prefill start),
generation_time_ms (first to last token), mean_itl_ms, tokens_per_second, all from the request's ground truth;
per_request_spec_decode_metrics=summary|detailed adds `speculative_decoding` (histogram of accepted drafts per
step, counts, K), and is refused without speculation as vLLM refuses it (labkit/sim/truth.py).

Text: each request's words are drawn from a stream seeded by (seed, request number), so no response repeats
itself exactly; fault_loop_request=n makes request n repeat one word (an exact-repetition loop).

KV pool: vllm:cache_config_info carries block_size, num_gpu_blocks (kv_cache_tokens // block_size, or
kv_gpu_blocks) and kv_cache_size_tokens = the logged kv_cache_tokens (left out with kv_tokens_label=false, as
older builds do). kv_hybrid_block_size=b labels block_size b, as vLLM does for a hybrid layout (its smallest KV
group's block size), so num_gpu_blocks x block_size is no longer the logged token count: DeepSeek-V4 as
vllm-project/vllm#51163 shows it is kv_cache_tokens=1179770, kv_gpu_blocks=20377, kv_hybrid_block_size=4.
SGLang flavour: sglang:max_total_num_tokens and /server_info max_total_num_tokens and
internal_states[0].memory_usage.token_capacity, all kv_cache_tokens, as is the log's `#tokens:`.

Faults (request numbers count generation requests since boot, from 1):
- fault_boot_crash="LINE": prints LINE as an ERROR during weight loading, then `EngineCore failed to start.`,
  exits 1 without ever listening.
- fault_http500_request=n: the n-th request gets HTTP 500 (OpenAI error body); it still takes number n.
- fault_restart_request=n: before request n every counter starts again from zero and the prefix cache is empty,
  as /metrics shows an engine that restarted (the process, its port and the ground truth stay).
- fault_exit_request=n, fault_exit_after_tokens=M: once the chunk reaching M tokens of request n is sent (with
  spec decoding a chunk may overshoot M), logs an ERROR line and the process exits with status 3 (the stream ends
  without [DONE]).
- fault_stall_request=n, fault_stall_after_tokens=M: after the chunk reaching M tokens of request n nothing more is
  sent; the connection stays open until the client closes it (status "stalled"); other connections are served.
- fault_hold_request=n, fault_hold_from=A, fault_hold_until=B: the chunks of request n after its first A tokens are
  generated on time but held back, and written in one go with the chunk reaching B tokens (0: the last chunk), as
  a client that fell behind would read them. Ground truth keeps the generation times (t_first / t_last are
  generation times, not write times).

Modules: cli (flags) -> config (SimConfig, presets) -> server (listen, event loop) -> boot (SimBootLog: boot
log lines), connection (HTTP/1.1 parsing, one per client) -> routes (App: state and simple routes), generate
(streamed and JSON generations, faults), wire (response framing); engine (SimEngine: schedule, cache,
batching), scheduler (StepScheduler: step mode's steps, queue, KV blocks) and steps (its engine loop),
speculation (the drafter: acceptance per prompt content), accounts (counters and ground truth records), metrics
(/metrics), openai (request parsing, response shapes), truth (the per-request metrics object), tokenizer;
process and oracle start it as a subprocess. The Sim prefixes keep them apart from labkit.serve's Engine
adapters and BootLog reader.

Decode-rate note: decode_tps is the mean rate of full steps. A client's (N-1)/(t_last-t_first) with spec decoding
reads a little lower for short N because the last step is cut at max_tokens but still takes a full step
(about 2% at N=256 with the dspark preset), as on a real engine.
"""

from labkit.sim.cli import add_arguments as add_cli_arguments
from labkit.sim.cli import config_from_args
from labkit.sim.cli import run as run_cli

__all__ = [
    "add_cli_arguments",
    "config_from_args",
    "run_cli",
]
