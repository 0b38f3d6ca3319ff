"""`labkit doctor --roofline` as a real subprocess: the checkpoint's safetensors headers read on the head node
(headers-only files here: nothing but the header is ever read) with its config.json, stored beside the recipe as
checkpoint/digest.json and config.json, and the roofline printed from them; a file that is not safetensors is
named with its node and nothing is stored."""

from __future__ import annotations

import json

from labkit.roofline import HeaderDigest
from labkit.roofline.headers import Tensor
from tests.support.lanes import sim_recipe
from tests.support.safetensors import header_bytes
from tests.support.serving import labkit_cli

TENSORS = [
    Tensor("model.embed_tokens.weight", "BF16", (64, 16)),
    Tensor("lm_head.weight", "BF16", (64, 16)),
    *(Tensor(f"model.layers.{i}.mlp.up_proj.weight", "F8_E4M3", (32, 16)) for i in range(2)),
]
CONFIG = {"num_hidden_layers": 2, "hidden_size": 16, "vocab_size": 64, "num_attention_heads": 2}


def _lane(tmp_path, files: dict[str, list[Tensor] | bytes]):
    model = tmp_path / "model"
    model.mkdir()
    for name, content in files.items():
        (model / name).write_bytes(content if isinstance(content, bytes) else header_bytes(content))
    (model / "config.json").write_text(json.dumps(CONFIG, indent=3))
    folder = tmp_path / "recipes" / "lane"
    sim_recipe(folder, 18797, cluster='device = "GB10"')
    toml = folder / "recipe.toml"
    toml.write_text(toml.read_text().replace("[model]\n", f'[model]\npath = "{model}"\n', 1))
    return folder


def _doctor(folder, *args):
    proc = labkit_cli("doctor", str(folder), "--roofline", *args)
    out, err = proc.communicate(timeout=180)
    return proc.returncode, out, err


def test_the_headers_are_read_on_the_head_and_stored_beside_the_recipe(tmp_path):
    folder = _lane(tmp_path, {"model-1.safetensors": TENSORS[:2], "model-2.safetensors": TENSORS[2:]})
    code, out, err = _doctor(folder)
    assert code == 0, out + err
    assert "roofline: 2 files, 4 tensors, 0.00 GB; stored in " in err
    stored = HeaderDigest.from_json(json.loads((folder / "checkpoint" / "digest.json").read_text()), "digest")
    assert stored.files == {"model-1.safetensors": tuple(sorted(TENSORS[:2], key=lambda t: t.name)),
                            "model-2.safetensors": tuple(TENSORS[2:])}  # fmt: skip
    assert stored.source.startswith(f"the headers of {tmp_path / 'model'} on localhost, read 20")
    # the node's config.json byte for byte
    assert (folder / "checkpoint" / "config.json").read_text() == (
        tmp_path / "model" / "config.json"
    ).read_text()
    assert "memory 273 GB/s per GPU (nominal" in err and "read per step, GB" in err  # the roofline they give


def test_a_file_that_is_not_safetensors_is_named_and_nothing_is_stored(tmp_path):
    folder = _lane(tmp_path, {"model-1.safetensors": TENSORS, "model-2.safetensors": b"\xff" * 16})
    code, out, err = _doctor(folder)
    assert code != 0
    assert f"localhost: {tmp_path / 'model'}/model-2.safetensors: not a safetensors header" in err
    assert not (folder / "checkpoint").exists()


def test_a_kv_figure_the_committed_digest_states_is_kept(tmp_path):
    """A checkpoint whose config cannot describe its cache (DeepSeek-V4.1's) has the figure stated in its
    committed digest; the digest read from the real headers keeps it."""
    folder = _lane(tmp_path, {"model-1.safetensors": TENSORS})
    (folder / "checkpoint").mkdir()
    (folder / "checkpoint" / "config.json").write_text(json.dumps(CONFIG))
    (folder / "checkpoint" / "tensors.toml").write_text(
        '[digest]\nsource = "by hand"\nkv_bytes_per_token = 890\nkv_note = "stated"\n'
        '[[tensors]]\nrows = [["lm_head.weight", "BF16", [64, 16]]]\n'
    )
    code, out, err = _doctor(folder)
    assert code == 0, out + err
    doc = json.loads((folder / "checkpoint" / "digest.json").read_text())
    assert (doc["kv_bytes_per_token"], doc["kv_note"]) == (890, "stated") and len(
        doc["files"]["model-1.safetensors"]
    ) == 4
