"""The tiny-vllm lane in tests: the shipped recipe on a port of the test's own, with a short measurement plan,
the tiny model built into the test cache and pointed at (as `labkit up` and `lab.measure` do).

vLLM CPU boots in 40-65 s on 2 cores: the tests share one lane per session where their flags agree, and boot
one of their own only where they must (tests/support/vllm_fixtures.py); `isolated` is the environment of a
lane that outlives one test (the docker runtime's module lane).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import uuid
from pathlib import Path

import pytest

from labkit import tinymodel
from labkit.recipe import DecodePlan, LanePlan, MeasurePlan, PrefillPlan, load_recipe
from labkit.recipe.lookup import load_plan
from tests.support.nodes import kill_processes, session_processes
from tests.support.workers import free_port as sim_free_port

PORTS = (18600, 18660)  # this lane's test ports (the recipe's own 18670 stays free for users)


def free_port() -> int:
    return sim_free_port(*PORTS)


def short_plan(**measure) -> MeasurePlan:
    return MeasurePlan(
        api="chat",
        runs=1,
        decode=DecodePlan(
            measure.get("concurrency", (1, 2)),
            measure.get("turns", 2),
            measure.get("output_tokens", 64),
            measure.get("warmup", 1),
        ),
        prefill=PrefillPlan(measure.get("prompt_tokens", (1024,)), measure.get("repeats", 1)),
        timeout=measure.get("timeout", 120.0),
    )


EAGER = ("--enforce-eager", ())  # no torch.compile: a cold boot took 61 s eager, 94 s compiled, here


def eager(plan: LanePlan) -> LanePlan:
    """`plan` with --enforce-eager, for a test to which the engine's speed and compile facts do not matter: a
    boot without torch.compile (vLLM then compiles no kernels with g++), the same serve path otherwise."""
    return dataclasses.replace(
        plan, engine=dataclasses.replace(plan.engine, args=plan.engine.args + (EAGER,))
    )


def tiny_vllm_plan(port: int, spec: str = "none", **measure):
    """The shipped recipe on `port` with a short plan, its tiny model built (HF format) into $LABKIT_CACHE."""
    plan = load_plan("tiny-vllm", spec=spec)
    plan = dataclasses.replace(
        plan, engine=dataclasses.replace(plan.engine, port=port), measure=short_plan(**measure)
    )
    return tinymodel.materialize(plan)


class Isolated:
    """A state dir, a model cache and a leftover token for a lane that outlives one test."""

    def __init__(self, root: Path):
        self.root = root
        self.token = uuid.uuid4().hex
        self.state_dir = root / "state"
        self.cache = root.parent / "labkit-cache"  # one model build for the whole session

    def processes(self):
        return session_processes(self.token)


@contextlib.contextmanager
def isolated(root: Path):
    """Environment of a module-scoped local lane; kills whatever it started on exit."""
    env = Isolated(root)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LABKIT_STATE_DIR", str(env.state_dir))
        mp.setenv("LABKIT_TEST_SESSION", env.token)
        mp.setenv("LABKIT_CACHE", str(env.cache))
        try:
            yield env
        finally:
            kill_processes(env.token)


def two_node_recipe(
    folder: Path, port: int, nodes: tuple[str, str], ssh_port: int, user: str, model_dir: Path
):
    """tiny-vllm as vLLM native multi-node: TP2 over two sshd nodes, process runtime on each. The fabric is `lo`
    (the nodes are loopback addresses of this machine): labkit detects each node's address on it at boot (the
    nodes' `ip` shim answers 127.0.0.2, .3) and sets GLOO_SOCKET_IFNAME and the rest from it. Written as a
    recipe file, so it is validated like one."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        "[lane]",
        'label = "vLLM tiny CPU, TP2 over two nodes"',
        "[model]",
        'repo = "labkit/tiny-llama"',
        f'path = "{model_dir}"',
        'served_name = "tiny"',
        "[engine]",
        'kind = "vllm"',
        'runtime = "process"',
        f"port = {port}",
        'multinode = "native"',
        "parallel = { tp = 2 }",
        "boot_timeout = 300",
        "[engine.args]",
        '"--max-model-len" = 16384',
        '"--dtype" = "bfloat16"',
        '"--max-num-seqs" = 8',
        '"--enforce-eager" = true',  # what is tested is the two nodes, not the compiled kernels (eager above)
        "[engine.env]",
        "HF_HUB_OFFLINE = 1",
        "VLLM_CPU_KVCACHE_SPACE = 1",
        "[cluster]",
        f"nodes = {json.dumps(list(nodes))}",
        f"ssh_port = {ssh_port}",
        f'user = "{user}"',
        "connect_timeout = 5",
        "[cluster.fabric]",
        'interface = "lo"',
        "[measure]",
        "decode = { concurrency = [1, 2], turns = 2, output_tokens = 64, warmup = 1 }",
        "prefill = { prompt_tokens = [1024], repeats = 1 }",
    ]
    (folder / "recipe.toml").write_text("\n".join(lines) + "\n")
    return load_recipe(folder).resolve()
