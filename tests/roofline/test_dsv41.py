"""The dsv41 lanes' committed checkpoint facts (recipes/dsv41-flash-1017-4x-vllm032/checkpoint/): the config is
the public release's byte for byte, the compact digest adds up to the published header audit's category totals,
the worked example of docs/roofline.md is what the code prints, and `labkit show` prints the roofline."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from labkit.roofline import Checkpoint, StepInputs, decode_step, load_checkpoint, read_folder
from tests.support.safetensors import header_bytes
from tools.docgen import section
from tools.roofline_doc import CHECKPOINT, DOC, worked_example

REPO = Path(__file__).resolve().parents[2]
GIB = 2**30


def _category(name: str, part: str) -> str:
    """The audit's categories (lvyufeng/PocketLLM's DeepSeek-V4.1-Flash page, "Tensor inventory")."""
    if part in ("routed", "draft_routed"):
        return "routed experts"
    if part == "engram" or ".engram." in name:
        return "engram"
    if part == "draft":
        return "mtp"
    if part in ("embedding", "head") or name == "norm.weight":
        return "embedding and head"
    if part == "shared":
        return "shared experts"
    return "attention" if ".attn." in name else "norms, gates and hyper-connections"


def test_the_config_is_the_public_release_byte_for_byte():
    data = (CHECKPOINT / "config.json").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    # as published for revision dba1be0a40aa45a94ad051997016db3960a90277: 3,311 bytes, 8be45ce0...21879
    assert len(data) == 3311 and digest.startswith("8be45ce0") and digest.endswith("21879")


def test_the_compact_digest_adds_up_to_the_published_audit():
    ck = load_checkpoint(CHECKPOINT)
    assert ck is not None
    sizes: Counter[str] = Counter()
    for p in ck.placed:
        sizes[_category(p.tensor.name, p.part)] += p.tensor.nbytes
    audit = {  # GiB, two decimals as published; the vision tower (0.90) is not in the digest
        "routed experts": 275.67,
        "engram": 189.13,
        "attention": 4.80,
        "embedding and head": 2.47,
        "shared experts": 1.32,
        "mtp": 0.66,
        "norms, gates and hyper-connections": 0.29,
    }
    assert {k: round(v / GIB, 2) for k, v in sizes.items()} == audit
    assert round(ck.digest.total_bytes / GIB, 2) == round(475.24 - 0.90, 2)
    assert ck.shape.routed_experts == 384 and ck.shape.experts_per_token == 6 and ck.shape.layers == 40
    # one expert: three FP4 matrices packed in I8 and their E8M0 scales, 18,800,640 bytes as published
    one = sum(p.tensor.nbytes for p in ck.placed if p.tensor.name.startswith("layers.0.ffn.experts.0."))
    assert one == 18_800_640
    # the lab note's 101.5 GB per Engram shard: each table, its scales and its projections
    layer1 = sum(p.tensor.nbytes for p in ck.placed if p.tensor.name.startswith("layers.1.engram."))
    assert round(layer1 / 1e9, 1) == 101.5


def test_the_worked_example_in_the_docs_is_what_the_code_prints():
    assert section(DOC.read_text(), "dsv41-example") == worked_example(), "run tools/roofline_doc.py"


@pytest.mark.parametrize("recipe", ["dsv41", "prod"])
def test_show_prints_bytes_per_step_and_the_ceiling(recipe):
    out = subprocess.run(
        [sys.executable, "-m", "labkit", "show", recipe, "--spec", "dspark"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    text = out.stdout.split("roofline from ", 1)[1]
    assert text.startswith("deepseek-ai/DeepSeek-V4.1-Flash@dba1be0a")
    assert "memory 273 GB/s per GPU (nominal" in text and "K5 τ≤6" in text
    assert "read per step, GB" in text and "ceiling, t/s" in text
    assert ("TP4 EP2 over 4 GPUs" if recipe == "prod" else "TP4 over 4 GPUs") in text


def test_headers_only_shards_from_the_committed_list_read_back_as_the_digest(tmp_path):
    """The committed list written as headers-only safetensors files (one per backbone layer's shard, as the
    release lays them out, the rest in one more), then read the way `labkit doctor --roofline` reads a node's:
    the same tensors, and the same bytes per decode step with and without DSpark."""
    ck = load_checkpoint(CHECKPOINT)
    assert ck is not None
    shards: dict[str, list] = {}
    for t in ck.digest.tensors:
        layer = t.name.split(".")[1] if t.name.startswith("layers.") and ".engram." not in t.name else "rest"
        shards.setdefault(layer, []).append(t)
    for i, (name, tensors) in enumerate(sorted(shards.items())):
        (tmp_path / f"model-{i:05d}-{name}.safetensors").write_bytes(header_bytes(tensors))
    (tmp_path / "config.json").write_bytes((CHECKPOINT / "config.json").read_bytes())
    read = Checkpoint.of(read_folder(tmp_path, "headers"), ck.config, tmp_path)
    assert sorted(read.digest.tensors, key=lambda t: t.name) == sorted(
        ck.digest.tensors, key=lambda t: t.name
    )
    for inputs in (StepInputs(1), StepInputs(2, positions=6, draft_passes=1, context=8192)):
        one = decode_step(read.placed, read.shape, inputs).parts
        assert one == {**decode_step(ck.placed, ck.shape, inputs).parts, "kv": one["kv"]}
    # the headers alone do not say what the model card says of V4.1's cache: the committed digest states it
    assert read.shape.kv_bytes_per_token == 2 * 40 * 512 * 2 and ck.shape.kv_bytes_per_token == 890
