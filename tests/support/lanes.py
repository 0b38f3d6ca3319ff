"""Test recipes for the simulator lane: locally (process runtime) or on the sshd nodes (docker via the shim)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from labkit.recipe import load_recipe

# the fabric of a DGX Spark as the fake nodes model it: the ConnectX-7 netdev and both RoCE twins of its port
SPARK_FABRIC = '[cluster.fabric]\ninterface = "cx7"\nhcas = ["rocep1s0f1", "roceP2p1s0f1"]\n'
# a [measure] line for sim lanes whose tests are about something else than the node samplers (comparisons,
# stopping rules, sweep points): no sampler per run, so the `alone` stretch those tests run in stays short
NO_TELEMETRY = "telemetry_period = 0"


def sim_recipe(
    folder: Path,
    port: int,
    nodes=("localhost",),
    runtime: str = "process",
    settings: dict | None = None,
    boot_timeout: float = 30,
    ssh_port: int = 22,
    user: str | None = None,
    flavor: str | None = None,
    extra: str = "",
    engine: str = "",
    cluster: str = "",
    image: str = "labkit/sim:shim",
    args: str = "",
    measure: str = "",
):
    """Write recipe.toml (+ sim.toml with simulator settings such as faults) into `folder`; return its LanePlan.

    `engine`, `args` and `cluster` are more TOML lines for [engine], [engine.args] and [cluster] (e.g.
    "drop_caches = true", '"--presett" = "test"', 'min_free_memory = "100T"'); `measure` more [measure] lines
    ("target_ci = 0.05"); `extra` is appended at the end."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "sim.toml"
    config.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in (settings or {}).items()))
    lines = [
        "[lane]",
        'label = "sim test lane"',
        "simulated = true",
        "[model]",
        'repo = "labkit/sim-test"',
        'served_name = "sim-test"',
        "[engine]",
        'kind = "sim"',
        f'runtime = "{runtime}"',
        f"port = {port}",
        f"boot_timeout = {boot_timeout}",
        *engine.splitlines(),
    ]
    if runtime == "docker":
        lines.append(f'image = "{image}"')
    lines += ["[engine.args]", '"--preset" = "test"', f'"--config" = "{config}"']
    if flavor:
        lines.append(f'"--flavor" = "{flavor}"')
    lines += args.splitlines()
    # a short measurement plan, so tests that measure through these lanes stay quick
    lines += [
        "[measure]",
        "decode = { concurrency = [1], turns = 2, output_tokens = 16, warmup = 0 }",
        "prefill = { prompt_tokens = [512], repeats = 1 }",
        *measure.splitlines(),
    ]
    lines += [
        "[cluster]",
        f"nodes = {json.dumps(list(nodes))}",
        f"ssh_port = {ssh_port}",
        "connect_timeout = 3",
        *cluster.splitlines(),
    ]
    if user:
        lines.append(f'user = "{user}"')
    # `extra`: more TOML at the end, e.g. "[cluster.fabric]\ninterface = ..." or "[engine.docker]\n..."
    (folder / "recipe.toml").write_text("\n".join(lines) + "\n" + extra)
    return load_recipe(folder).resolve()


def chat(base_url: str, model: str, max_tokens: int = 8, timeout: float = 10) -> dict:
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": max_tokens}
    ).encode()
    req = urllib.request.Request(
        base_url + "/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def papermill_bench(tmp_path: Path, recipes: Path, *params: str) -> tuple[subprocess.CompletedProcess, Path]:
    """The bench notebook run by papermill as a user runs it, with `params` (-p name value pairs) on the recipes
    in `recipes`, results in `tmp_path / "results"`; the finished process and the executed notebook's path."""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": str(root),
        "LABKIT_RESULTS": str(tmp_path / "results"),
        "LABKIT_RECIPES": str(recipes),
    }
    env.pop("LABKIT_BATCH", None)
    papermill = str(Path(sys.executable).with_name("papermill"))
    out = tmp_path / "out.ipynb"
    proc = subprocess.run(
        [papermill, str(root / "notebooks" / "bench.ipynb"), str(out), *params],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return proc, out
