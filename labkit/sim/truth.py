"""The per-request `metrics` object a simulated response carries, as vLLM 0.32 builds it with
`--enable-per-request-metrics` (timing) and `--per-request-spec-decode-metrics` (speculative counts), made from
the request's ground truth so a test knows exactly what the client should read (docs/engines.md, "Per-request
metrics in the response").

vLLM's timing fields come from its engine core's stamps: queued, scheduled, first and last token. Here the
request's arrival on its connection stands for queued (a request held for a free slot, `max_num_seqs`, waits
in between), the start of its prefill for scheduled, and the actual emission times of its first and last token
for the token stamps. Pure: numbers in, a dict out.
"""

from __future__ import annotations

from labkit.sim.config import SimConfig
from labkit.sim.engine import RequestTruth


def timing(rec: RequestTruth, received: float) -> dict[str, float]:
    """vLLM's timing fields (milliseconds), each only when the stamps it needs exist, as vLLM leaves a field
    out then: TTFT from scheduled (not from arrival), decode time from the first to the last token."""
    out: dict[str, float] = {}
    n, first, last, scheduled = rec.completion_tokens, rec.t_first, rec.t_last, rec.t_prefill_start
    if first is not None:
        out["time_to_first_token_ms"] = (first - scheduled) * 1000
    if first is not None and last is not None:
        out["generation_time_ms"] = (last - first) * 1000
    out["queue_time_ms"] = (scheduled - received) * 1000
    if first is not None and last is not None and n > 1:
        out["mean_itl_ms"] = (last - first) / (n - 1) * 1000
    if last is not None and last > scheduled:
        out["tokens_per_second"] = n / (last - scheduled)
    return out


def spec(
    rec: RequestTruth,
    cfg: SimConfig,
    histogram: list[int],
    steps: list[int],
    drafted: list[int] | None = None,
) -> dict:
    """vLLM's `speculative_decoding` object: the histogram of accepted drafts per verify step (index j = steps
    that accepted exactly j, bonus excluded), the mean acceptance length per verify step (bonus included), the
    acceptance rate, and with `detailed` the accepted and drafted counts of every step in order (`drafted`: K each
    when not given)."""
    spec_steps, accepted = sum(histogram), rec.accepted
    out: dict = {
        "mean_acceptance_length": 1.0 + accepted / spec_steps if spec_steps else 1.0,
        "draft_acceptance_rate": accepted / rec.draft_tokens if rec.draft_tokens else 0.0,
        "acceptance_histogram": list(histogram),
        "num_spec_steps": spec_steps,
        "num_accepted_draft_tokens": accepted,
        "num_draft_tokens": rec.draft_tokens,
        "num_spec_tokens": cfg.spec_k,
    }
    if cfg.per_request_spec_decode_metrics == "detailed" and steps:
        out["per_step_accepted"] = list(steps)
        out["per_step_drafted"] = list(drafted) if drafted else [cfg.spec_k] * len(steps)
    return out


def request_metrics(
    cfg: SimConfig,
    rec: RequestTruth,
    received: float,
    histogram: list[int],
    steps: list[int],
    drafted: list[int] | None = None,
) -> dict | None:
    """The response's `metrics` object, None when neither setting asks for it (vLLM then sends none)."""
    out: dict = {}
    if cfg.enable_per_request_metrics:
        out.update(timing(rec, received))
    if cfg.per_request_spec_decode_metrics != "none" and cfg.spec_on:
        out["speculative_decoding"] = spec(rec, cfg, histogram, steps, drafted)
    return out if (cfg.enable_per_request_metrics or "speculative_decoding" in out) else None
