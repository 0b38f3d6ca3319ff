"""Prometheus text exposition read into samples: {metric name: [(labels, value), ...]}.

It lives here, below labkit.measure, because the lane's boot reads the engine's /metrics too (the KV pool's
`vllm:cache_config_info` labels, labkit.serve.kvsources); labkit.measure.server.metrics re-exports it for the
per-run counter deltas (docs/engines.md, "Metrics labkit reads").
"""

from __future__ import annotations

import re

Samples = dict[str, list[tuple[dict[str, str], float]]]

SAMPLE_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(?:\s+\S+)?\s*$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def unescape(value: str) -> str:
    r"""A label value as exported, its `\"`, `\\` and `\n` escapes undone."""
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_prometheus(text: str) -> Samples:
    """{metric name: [(labels, value), ...]} from Prometheus text exposition; comments and junk lines skipped."""
    out: Samples = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_LINE.match(line)
        if not m:
            continue
        name, _, labels, value = m.groups()
        try:
            v = float(value)
        except ValueError:
            continue
        lab = {k: unescape(val) for k, val in LABEL.findall(labels or "")}
        out.setdefault(name, []).append((lab, v))
    return out
