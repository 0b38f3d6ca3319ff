"""Bytes per decode step on real safetensors files: the tiny model labkit builds (its header read, its bytes
counted by hand), headers-only files standing in for a checkpoint, the expert and collective formulas."""

from __future__ import annotations

import json
import math

import pytest

from labkit.roofline import Checkpoint, Parallel, StepInputs, ceiling, decode_step, read_folder
from labkit.roofline.headers import HeaderError, Tensor
from labkit.roofline.model import ModelShape
from labkit.roofline.step import StepBytes, collective, distinct_experts
from labkit.tinymodel import build, spec
from tests.support.safetensors import header_bytes

pytest.importorskip("tokenizers", reason="building the HF tiny model needs numpy and tokenizers")

TINY = spec.PRESETS["tiny-llama"]  # vocab 2048, 128 wide, 4 layers, 4 heads of 32, ff 384, BF16


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build.ensure(TINY, root=tmp_path_factory.mktemp("hf"), log=None, fmt="hf")


def test_the_tiny_models_bytes_per_step_are_its_tensors_counted_by_hand(tiny):
    digest = read_folder(tiny, "tiny")
    data = (
        (tiny / "model.safetensors").stat().st_size
        - 8
        - int.from_bytes((tiny / "model.safetensors").read_bytes()[:8], "little")
    )
    assert digest.total_bytes == data  # every byte of the file after its header is a tensor's
    ck = Checkpoint.of(digest, json.loads((tiny / "config.json").read_text()), tiny)
    # by hand, BF16 (2 bytes): q, k, v, o 128x128 and gate, up, down 128x384 and two norms of 128 per layer,
    # the final norm; the head 2048x128; the embedding one row of 128 per token
    layer = 4 * 128 * 128 * 2 + 3 * 128 * 384 * 2 + 2 * 128 * 2
    assert ck.shape.kv_bytes_per_token == 2 * 4 * 4 * 32 * 2  # K and V, 4 layers x 4 heads x 32, BF16
    step = decode_step(ck.placed, ck.shape, StepInputs(sequences=2, context=100))
    assert step.parts["dense"] == 4 * layer + 128 * 2
    assert step.parts["head"] == 2048 * 128 * 2
    assert step.parts["embedding"] == 2 * 128 * 2  # two sequences, one row each
    assert step.parts["kv"] == 2 * 100 * 2048
    assert step.parts["routed"] == step.parts["shared"] == step.engram == 0
    c = ceiling(step, ck.shape, Parallel(), bandwidth=1e9, fabric=None)
    assert c.fabric_bytes == 0 and c.tps == pytest.approx(2 / (step.total / 1e9))


def _moe() -> list[Tensor]:
    """A two-layer MoE: per layer an attention weight, 4 experts of 3 FP4 tensors with scales, a shared one."""
    out = [Tensor("embed.weight", "BF16", (100, 16)), Tensor("head.weight", "BF16", (100, 16))]
    for layer in range(2):
        out.append(Tensor(f"layers.{layer}.attn.wq.weight", "F8_E4M3", (16, 16)))
        out.append(Tensor(f"layers.{layer}.ffn.shared_experts.w1.weight", "F8_E4M3", (32, 16)))
        for e in range(4):
            for w in ("w1", "w2", "w3"):
                out.append(Tensor(f"layers.{layer}.ffn.experts.{e}.{w}.weight", "I8", (32, 8)))
                out.append(Tensor(f"layers.{layer}.ffn.experts.{e}.{w}.scale", "F8_E8M0", (32, 1)))
    return out


CONFIG = {"num_hidden_layers": 2, "hidden_size": 16, "vocab_size": 100, "n_routed_experts": 4,
          "num_experts_per_tok": 2, "kv_lora_rank": 8, "qk_rope_head_dim": 4}  # fmt: skip


def test_headers_only_files_give_the_moe_and_mla_figures(tmp_path):
    tensors = _moe()
    half = len(tensors) // 2
    for i, part in enumerate((tensors[:half], tensors[half:])):
        (tmp_path / f"model-{i}.safetensors").write_bytes(header_bytes(part))  # no weights follow
    ck = Checkpoint.of(read_folder(tmp_path, "test"), CONFIG, tmp_path, kv_dtype_bytes=1)
    expert = 3 * (32 * 8 + 32)  # one expert's three weights and scales
    one = decode_step(ck.placed, ck.shape, StepInputs(1, context=10))
    assert one.parts["routed"] == 2 * 2 * expert  # top-2 of each of the two layers
    assert one.parts["dense"] == 2 * 16 * 16 and one.parts["shared"] == 2 * 32 * 16
    assert ck.shape.kv_bytes_per_token == 2 * (8 + 4)  # MLA: latent 8 + rope 4 per layer, FP8
    assert one.parts["kv"] == 10 * 24
    many = decode_step(ck.placed, ck.shape, StepInputs(3, positions=2))
    assert many.parts["routed"] == pytest.approx(distinct_experts(4, 2, 6) * 2 * expert)
    assert ck.shape.experts_per_token == 2 and many.experts_touched < 4


def test_distinct_experts_is_k_for_one_token_and_tends_to_all():
    assert distinct_experts(384, 6, 1) == pytest.approx(6)
    assert distinct_experts(384, 6, 2) == pytest.approx(384 * (1 - (1 - 6 / 384) ** 2))
    assert distinct_experts(384, 6, 10_000) == pytest.approx(384)
    assert distinct_experts(0, 0, 5) == 0


def test_the_collective_is_two_ring_all_reduces_per_layer_under_tp():
    shape = ModelShape(layers=10, hidden=1000, vocab=10)
    step = StepBytes(dict.fromkeys(("dense", "routed"), 0.0), 0.0, 0.0, StepInputs(sequences=3))
    assert collective(step, shape, Parallel(tp=1)) == 0
    # per layer two all-reduces of 3 tokens x 1000 x 2 bytes, each sending 2 (n - 1) / n of it
    assert collective(step, shape, Parallel(tp=4, gpus=4)) == pytest.approx(10 * 2 * 2 * 3 / 4 * 3 * 1000 * 2)


def test_bad_headers_are_refused_naming_the_file_and_tensor(tmp_path):
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(header_bytes([Tensor("a", "BF16", (4,))])[:12])
    with pytest.raises(HeaderError, match="cut.safetensors: the header is cut short"):
        read_folder(tmp_path, "t")
    cut.unlink()
    text = json.dumps({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}).encode()
    (tmp_path / "bad.safetensors").write_bytes(len(text).to_bytes(8, "little") + text)
    with pytest.raises(HeaderError, match="bad.safetensors: tensor a spans 6 bytes, its dtype and shape 8"):
        read_folder(tmp_path, "t")


def test_sub_byte_dtypes_round_up_to_whole_bytes():
    assert Tensor("x", "F4", (3, 3)).nbytes == math.ceil(9 / 2)
