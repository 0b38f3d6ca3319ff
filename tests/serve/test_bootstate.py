"""The boot state (docs/engines.md, "Boot state"): the script each node runs with the pre-boot checks (every
argument quoted, $HOME left to the node's shell), its output as facts (the nvidia-smi header, ethtool's firmware
line, each compile cache's files and bytes), the cold-cache flag, and the compare gate's two facts from it."""

from __future__ import annotations

import dataclasses
import subprocess

from labkit.nodes import Result
from labkit.recipe.lookup import load_plan
from labkit.report.gate import compile_caches, gate, node_versions
from labkit.serve import cold_cache_flags
from labkit.serve.bootstate import parse_state, state_check, state_command
from labkit.serve.verdict import OK, WARN
from tests.support.results import stored_run

OUTPUT = """# kernel
6.11.0-1016-nvidia
# nvidia-smi
Thu Dec  3 17:20:00 2026
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
# firmware
driver: mlx5_core
version: 24.10-1.1.4
firmware-version: 28.43.1014 (NVD0000000087)
bus-info: 0000:01:00.1
# cache vllm
812
2104553472
# cache flashinfer
0
4096
# cache triton
absent
# cache tilelang
3
120
"""


def test_the_script_quotes_its_arguments_and_leaves_home_to_the_node():
    plan = load_plan("dsv41")
    text = state_command(plan, "dgx5")
    assert "ethtool -i enp1s0f1np1" in text
    assert 'if [ -d "$HOME"/.cache/labkit/compile/vllm/flashinfer ]' in text
    odd = dataclasses.replace(
        plan,
        cluster=dataclasses.replace(
            plan.cluster, fabric=dataclasses.replace(plan.cluster.fabric, interface="a b")
        ),
    )
    assert "ethtool -i 'a b'" in state_command(odd, "dgx5")
    # a process lane reads the engine's own default folders; the simulator has none
    vllm = state_command(load_plan("tiny-vllm"))
    assert '"$HOME"/.cache/vllm' in vllm and "ethtool" not in vllm
    assert "# cache" not in state_command(load_plan("sim"))


def test_the_script_runs_in_a_real_shell_and_reads_a_real_cache(tmp_path):
    cache = tmp_path / ".cache" / "vllm" / "torch_compile_cache"
    cache.mkdir(parents=True)
    (cache / "a.py").write_text("x" * 1000)
    out = subprocess.run(
        ["sh", "-c", state_command(load_plan("tiny-vllm"))],
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )
    facts = parse_state(out.stdout)
    assert out.returncode == 0 and facts["kernel"] and facts["driver"] is None  # no nvidia-smi here
    assert facts["caches"]["vllm"]["files"] == 1 and facts["caches"]["vllm"]["bytes"] >= 1000
    assert facts["cold"] == []


def test_the_output_is_read_as_versions_and_caches():
    facts = parse_state(OUTPUT)
    assert (facts["kernel"], facts["driver"], facts["cuda"]) == ("6.11.0-1016-nvidia", "580.95.05", "13.0")
    assert facts["firmware"] == "28.43.1014 (NVD0000000087)"
    assert (
        facts["caches"]["vllm"] == {"files": 812, "bytes": 2104553472} and facts["caches"]["triton"] is None
    )
    assert (
        facts["cold"] == []
    )  # the engine's own cache (the first) has files: the kernel libraries' do not count
    assert parse_state(OUTPUT.replace("812\n2104553472", "0\n4096"))["cold"] == ["vllm"]
    assert parse_state(OUTPUT.replace("812\n2104553472", "absent"))["cold"] == ["vllm"]
    c = state_check("dgx5", Result("dgx5", "state", OUTPUT, "", 0))
    assert c.status == OK and c.result.startswith("kernel 6.11.0-1016-nvidia, driver 580.95.05, cuda 13.0")
    assert "compile caches warm (vllm 812 files 2.1 GB, flashinfer 0 files 4.1 kB, triton absent" in c.result
    assert state_check("dgx5", Result("dgx5", "state", "", "ssh: lost", 255)).status == WARN
    missing = parse_state(
        "# kernel\n6.8.0\n# nvidia-smi\nsh: 1: nvidia-smi: not found\n# firmware\nsh: ethtool: not found\n"
    )
    assert missing["driver"] is None and missing["cuda"] is None and missing["firmware"] is None


def test_a_cold_cache_flags_the_run_and_the_gate_lists_the_state():
    empty = OUTPUT.replace("812\n2104553472", "absent")
    cold = {"dgx5": parse_state(empty), "dgx6": parse_state(empty)}
    flags = cold_cache_flags(cold)
    assert [f["code"] for f in flags] == ["cold-compile-cache"] * 2 and flags[0]["window"] == "boot"
    assert "dgx5: compile cache vllm empty or absent" in flags[0]["message"]
    warm = {n: {**f, "cold": []} for n, f in cold.items()}
    assert cold_cache_flags(warm) == []
    newer = {n: {**f, "kernel": "6.14.0-1001-nvidia"} for n, f in warm.items()}
    docs = [
        stored_run({"run_id": "a", "boot": {"state": cold}}),
        stored_run({"run_id": "b", "boot": {"state": newer}}),
    ]
    assert compile_caches(docs[0]) == "cold on dgx5, dgx6" and compile_caches(docs[1]) == "warm"
    assert node_versions(docs[1]).startswith("kernel 6.14.0-1001-nvidia, driver 580.95.05, cuda 13.0")
    g = gate(docs[:1], docs[1:])
    items = {i.fact: i for i in g.items}
    assert {"node versions", "compile caches"} <= set(items) and not items["node versions"].blocking
    bare = stored_run({"run_id": "c"})
    assert compile_caches(bare) == "none recorded" and node_versions(bare) == "not recorded"
