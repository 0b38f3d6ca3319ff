"""The tools themselves, run here against one real vLLM CPU server (the tiny model), their files imported as they
come: `vllm bench serve` (from the vLLM CPU build), llama-benchy, guidellm and aiperf (each in its venv under
<venv>/tools/, made by the test setup). A tool that is not installed skips its test saying so. The figures'
agreement across tools is the benchmark's business (benchmarks/bench_tools_table.py), not a test's.

The server is the session's shared tiny-vllm lane (tests/support/vllm_fixtures.py): what is asserted is how each
tool's file imports, which neither the engine's speculation nor the requests it served before change.

Where LABKIT_TOOL_FILES names a folder, a tool's file found there is imported instead of running that tool again:
CI runs benchmarks/bench_tools_table.py first with `--files` that folder, so each tool has run once, against a
real vLLM CPU server (the recipe's own boot, 128 output tokens), by the same commands (tests/support/tool_files.py).
A file the folder lacks (the benchmark failed, or a tool was not installed then) is written here as before."""

from __future__ import annotations

import os
import shutil
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


# the folder where benchmarks/bench_tools_table.py --files left the files its tool runs wrote (CI sets it)
GIVEN = "LABKIT_TOOL_FILES"
NAMES = {  # format: the file's name as its tool writes it (and as the benchmark keeps it)
    "vllm-bench": "vllm-bench-c1.json",
    "llama-benchy": "llama-benchy.json",
    "guidellm": "guidellm.json",
    "aiperf": "profile_export_aiperf.json",
}


def given_files(root: Path) -> dict[str, Path]:
    """{format: its file copied into `root`} for each tool's file in the folder LABKIT_TOOL_FILES names."""
    folder = Path(os.environ.get(GIVEN) or "/nonexistent")
    return {
        fmt: Path(shutil.copy(folder / name, root / name))
        for fmt, name in NAMES.items()
        if (folder / name).is_file()
    }


@pytest.fixture(scope="module")
def written(vllm_shared, tmp_path_factory):
    """Every installed tool's file: {format: path}. A file the benchmark left (LABKIT_TOOL_FILES) is taken as
    it is; every other tool runs here against the shared vLLM server."""
    root = tmp_path_factory.mktemp("tools")
    model, url = vllm_shared.model_dir, vllm_shared.url
    files = given_files(root)
    if set(files) == set(NAMES):
        return SimpleNamespace(files=files, root=root)
    vllm_shared.prepare()
    if "vllm-bench" not in files:
        tf.vllm_bench(url, model, root, 1)
        files["vllm-bench"] = root / "vllm-bench-c1.json"
    if "llama-benchy" not in files and tf.llama_benchy(url, model, root, tf.tools_root(), root / "home"):
        files["llama-benchy"] = root / "llama-benchy.json"
    if "guidellm" not in files and tf.guidellm(url, model, root, tf.tools_root()):
        files["guidellm"] = root / "guidellm.json"
    if "aiperf" not in files and tf.aiperf(url, model, root, tf.tools_root(), root / "hf-home"):
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
