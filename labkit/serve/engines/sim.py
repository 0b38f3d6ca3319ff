"""labkit's simulator as an engine: `python -m labkit.sim`, with the log wording of the flavor it mimics."""

from __future__ import annotations

import re
import sys

from labkit.recipe import LanePlan, repo_root
from labkit.serve.engines.base import BootFacts, Engine, NodeLaunch, NodeSpec, Probe, env_tuple
from labkit.serve.engines.sglang import Sglang
from labkit.serve.engines.vllm import Vllm

# Every flag of `python -m labkit.sim --help`: its own options and one per setting (labkit.serve may not import
# labkit.sim; tests/sim/test_setting_flags.py keeps this equal to the real help).
# docs/engines.md, "Known flags and the sweep flag check".
SIM_KNOWN_FLAGS = frozenset(
    {
        "-h", "--help", "--preset", "--config", "--set", "--flavor", "--host", "--port", "--model-name",
        "--list",
        # one per setting (labkit/sim/config.py, SimConfig)
        "--model-path", "--engine-version", "--seed", "--max-model-len", "--kv-cache-tokens", "--block-size",
        "--kv-gpu-blocks", "--kv-tokens-label", "--kv-hybrid-block-size", "--prefix-caching",
        "--prompt-tokens-details", "--prefill-tps", "--prefill-chunk-tokens", "--decode-tps", "--decode-noise",
        "--batch-beta", "--cold-requests", "--cold-decode-tps", "--cold-prefill-tps", "--eos-mean-tokens",
        "--spec-method", "--spec-k", "--spec-accept", "--boot-weights-s", "--boot-init-s", "--weights-gib",
        "--kv-log-form", "--record-chunks", "--sglang-warmup-s", "--fault-boot-crash",
        "--fault-http500-request", "--fault-exit-request", "--fault-exit-after-tokens", "--fault-stall-request",
        "--fault-stall-after-tokens", "--fault-hold-request", "--fault-hold-from", "--fault-hold-until",
        "--fault-restart-request", "--enable-per-request-metrics", "--per-request-spec-decode-metrics",
        "--max-num-seqs", "--fault-loop-request", "--spec-accept-prose", "--spec-accept-code",
        "--spec-accept-structured", "--spec-accept-chat", "--idle-after-s", "--idle-factor",
        "--decode-ctx-slope", "--max-num-batched-tokens", "--step-base-s", "--step-token-s", "--step-seq-s",
        "--roofline-bytes-per-token", "--memory-bandwidth",
    }
)  # fmt: skip


class Sim(Engine):
    """Every node runs one simulator bound to its own address; only the head's is used as the endpoint."""

    kind = "sim"
    package = "labkit.sim"
    known_flags = SIM_KNOWN_FLAGS

    def __init__(self, flavor: str = "vllm"):
        self.flavor = flavor
        self.inner: Engine = Sglang() if flavor == "sglang" else Vllm()
        self.patterns = self.inner.patterns
        self.fatal = self.inner.fatal
        self.ready_pattern = self.inner.ready_pattern
        self.kv_lines = self.inner.kv_lines

    @classmethod
    def for_plan(cls, plan: LanePlan) -> Sim:
        flavor = plan.engine.arg("--flavor")
        return cls(flavor[0] if flavor else "vllm")

    def apply(self, facts: BootFacts, name: str, m: re.Match) -> None:
        self.inner.apply(facts, name, m)

    def kv_tokens(self, name: str, m: re.Match) -> int:
        return self.inner.kv_tokens(name, m)

    def command(self, python: str = "python3") -> tuple[str, ...]:
        return (python, "-m", "labkit.sim")

    def probes(self, plan: LanePlan) -> list[Probe]:
        return [Probe("/health"), Probe("/v1/models")]

    def launch(self, plan: LanePlan, nodes: list[NodeSpec], python: str = "python3") -> list[NodeLaunch]:
        env = env_tuple(plan, {})
        if python == sys.executable:
            # A local simulator runs this checkout's labkit even when it is not pip-installed.
            env += (("PYTHONPATH", str(repo_root())),)
        out = []
        for rank, node in enumerate(nodes):
            argv = [
                *self.command(python),
                "--host",
                node.client_address,
                "--port",
                str(plan.engine.port),
                "--model-name",
                plan.served_name,
                *plan.engine.argv(),
            ]
            out.append(NodeLaunch(node.name, rank, tuple(argv), env, serves_http=rank == 0))
        return out
