"""The tools themselves, run here against one real vLLM CPU server (the tiny model), their files imported as they
come: `vllm bench serve` (from the vLLM CPU build), llama-benchy, guidellm and aiperf (each in its venv under
<venv>/tools/, made by the test setup). A tool that is not installed skips its test saying so. The figures'
agreement across tools is the benchmark's business (benchmarks/bench_tools_table.py), not a test's.

The server is the session's shared tiny-vllm lane (tests/support/vllm_fixtures.py): what is asserted is how each
tool's file imports, which neither the engine's speculation nor the requests it served before change."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit.exchange import import_file
from labkit.store import read_run
from tests.support import tool_files as tf
from tests.support.vllm import vllm_available

pytestmark = pytest.mark.skipif(vllm_available() is not None, reason=vllm_available() or "")

TOOLS = {  # format: (tool venv, how the tool names its version)
    "llama-benchy": ("llama-benchy", "llama-benchy"),
    "guidellm": ("guidellm", "guidellm"),
    "aiperf": ("aiperf", "aiperf"),
}


@pytest.fixture(scope="module")
def written(vllm_shared, tmp_path_factory):
    """Every installed tool's file against the shared vLLM server: {format: path}, and the commands."""
    root = tmp_path_factory.mktemp("tools")
    model, url = vllm_shared.model_dir, vllm_shared.url
    files: dict[str, Path] = {}
    vllm_shared.prepare()
    tf.vllm_bench(url, model, root, 1)
    files["vllm-bench"] = root / "vllm-bench-c1.json"
    if tf.llama_benchy(url, model, root, tf.tools_root(), root / "home"):
        files["llama-benchy"] = root / "llama-benchy.json"
    if tf.guidellm(url, model, root, tf.tools_root()):
        files["guidellm"] = root / "guidellm.json"
    if tf.aiperf(url, model, root, tf.tools_root(), root / "hf-home"):
        files["aiperf"] = root / "aiperf" / "profile_export_aiperf.json"
    return SimpleNamespace(files=files, root=root)


def installed_version(venv: str, package: str) -> str | None:
    python = tf.tools_root() / venv / "bin" / "python"
    if not python.exists():
        return None
    code = f"import importlib.metadata as m; print(m.version({package!r}))"
    return subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


@pytest.mark.parametrize("fmt", ["vllm-bench", *TOOLS])
def test_each_tools_file_imports_with_its_version_and_definitions(written, fmt, tmp_path):
    if fmt not in written.files:
        pytest.skip(
            f"{fmt} is not installed under {tf.tools_root()} (the test setup installs it: make env-tools)"
        )
    outcomes = import_file(written.files[fmt], lane=f"tools-{fmt}", results=tmp_path)
    assert {o.imported.format for o in outcomes} == {fmt}
    if fmt in TOOLS:
        assert {o.imported.tool_version for o in outcomes} == {installed_version(*TOOLS[fmt])}
    c1 = next(o for o in outcomes if o.imported.setting.concurrency == 1)
    doc = read_run(c1.path)
    about = {row.about for row in doc.measure_info.values() if row.about}
    assert {"decode_c1", "ttft_c1"} <= about
    assert doc.provenance.model == "tiny" and doc.source == "import"
    assert (c1.path / f"original-{written.files[fmt].name}").read_bytes() == written.files[fmt].read_bytes()
