"""The tiny model as a Hugging Face model directory (vLLM, SGLang): the same tokenizer training and the same
weights as the GGUF, written with numpy, json and `tokenizers` only (no gguf, no torch).

Files, names and the BF16 rounding: docs/tinymodel.md, "The HF format". The directory's bytes depend only on
the spec, the training text, the `tokenizers` version, BUILDER_VERSION and HF_WRITER_VERSION. No cache is
involved here (labkit.tinymodel.build has it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from labkit.tinymodel.inputs import CORPUS_FILES, corpus, text_hashes, versions
from labkit.tinymodel.safetensors_file import write_bf16
from labkit.tinymodel.spec import (
    BOS_ID,
    CHAT_TEMPLATE,
    EOS_ID,
    PAD_ID,
    SPECIALS,
    ModelBuildError,
    TinySpec,
)
from labkit.tinymodel.tokenizer import suppressed, tokens_and_merges, train
from labkit.tinymodel.weights import logit_bias, weights

WEIGHTS_FILE = "model.safetensors"
LAYER_NAMES = {  # GGUF blk.N.<key> -> HF model.layers.N.<value>
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def hf_name(gguf_name: str) -> str:
    """The HF tensor name of a GGUF tensor name: blk.3.attn_q.weight -> model.layers.3.self_attn.q_proj.weight."""
    base, _, suffix = gguf_name.rpartition(".")
    parts = base.split(".")
    if len(parts) == 1 and parts[0] in TOP_NAMES:
        return f"{TOP_NAMES[parts[0]]}.{suffix}"
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in LAYER_NAMES:
        return f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}.{suffix}"
    raise ModelBuildError(f"no HF name for the GGUF tensor {gguf_name}")


def rope_rows(array: Any, heads: int) -> Any:
    """Q or K rows from llama.cpp's RoPE layout (each head's rotated pairs adjacent) to HF's rotate-half
    layout (pairs half a head apart): the inverse of the permutation llama.cpp's HF converter applies."""
    rows = array.shape[0]
    return array.reshape(heads, rows // heads // 2, 2, *array.shape[1:]).swapaxes(1, 2).reshape(array.shape)


def hf_tensors(spec: TinySpec, tensors: dict[str, Any]) -> dict[str, Any]:
    """weights.py's float32 tensors under their HF names (sorted), Q and K rows in HF's RoPE order."""
    out = {}
    for name, array in tensors.items():
        if ".attn_q." in name:
            array = rope_rows(array, spec.heads)
        elif ".attn_k." in name:
            array = rope_rows(array, spec.kv_heads)
        out[hf_name(name)] = array
    return dict(sorted(out.items()))


def config(spec: TinySpec) -> dict[str, Any]:
    """config.json: a plain LlamaForCausalLM."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": spec.vocab,
        "hidden_size": spec.embedding,
        "intermediate_size": spec.ff,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "max_position_embeddings": spec.context,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": PAD_ID,
        "torch_dtype": "bfloat16",  # the name older transformers read
        "dtype": "bfloat16",  # the name newer ones read
    }


def tokenizer_config(spec: TinySpec) -> dict[str, Any]:
    """tokenizer_config.json: the fast tokenizer of tokenizer.json, its special tokens and the chat template."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[BOS_ID],
        "eos_token": SPECIALS[EOS_ID],
        "pad_token": SPECIALS[PAD_ID],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,  # decode gives the pieces' bytes back unchanged
        "model_max_length": spec.context,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {
                "content": s,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, s in enumerate(SPECIALS)
        },
    }


def generation_config() -> dict[str, Any]:
    """generation_config.json: token ids only, so an engine adds no sampling defaults of its own."""
    return {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}


def build_hf(spec: TinySpec, dest: Path, texts: list[str] | None = None) -> dict[str, Any]:
    """Write the HF model directory `dest` (built beside it and renamed, so never half there; `dest` must
    not exist or be empty) and return its facts; no cache involved."""
    spec.check()
    texts = corpus() if texts is None else texts
    tool_versions = versions("hf")
    tok = train(texts, spec.vocab)
    tokens, merges = tokens_and_merges(tok)
    supp = suppressed(tokens, spec.allow_lt)
    tensors = hf_tensors(spec, weights(spec, logit_bias(spec, supp)))

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent))
    try:
        write_bf16(work / WEIGHTS_FILE, tensors)
        (work / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
        for name, content in (
            ("config.json", config(spec)),
            ("tokenizer_config.json", tokenizer_config(spec)),
            ("generation_config.json", generation_config()),
        ):
            (work / name).write_text(json.dumps(content, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.chmod(work, 0o755)  # mkdtemp's 0700 would hide the model from an engine running as another user
        files = {p.name: {"sha256": _sha256(p), "bytes": p.stat().st_size} for p in sorted(work.iterdir())}
        try:
            os.replace(work, dest)
        except OSError as e:
            raise ModelBuildError(f"cannot put the HF model at {dest} (it exists and is not empty?): {e}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "format": "hf",
        "dtype": "bfloat16",
        "spec": dataclasses.asdict(spec),
        "versions": tool_versions,
        "text_files": list(CORPUS_FILES),
        "text_sha256": text_hashes(texts),
        "python": sys.version.split()[0],
        "merges": len(merges),
        "suppressed": int(sum(supp)),
        "tensors": len(tensors),
        "files": files,
        "bytes": sum(f["bytes"] for f in files.values()),
        "sha256": hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest(),
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
