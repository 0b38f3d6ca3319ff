"""Writing one tiny model: train the tokenizer, make the weights, write the GGUF file (atomically), say its facts.

Determinism: the file's bytes depend only on the spec, the training text, the `tokenizers` version (BPE
training) and the `gguf` writer version. No cache is involved here (labkit.tinymodel.build has it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from labkit.tinymodel.inputs import CORPUS_FILES, corpus, text_hashes, versions
from labkit.tinymodel.spec import BOS_ID, CHAT_TEMPLATE, EOS_ID, PAD_ID, SPECIALS, TinySpec
from labkit.tinymodel.tokenizer import suppressed, train_tokenizer
from labkit.tinymodel.weights import logit_bias, weights


def build(spec: TinySpec, dest: Path, texts: list[str] | None = None) -> dict[str, Any]:
    """Write the GGUF to `dest` (atomically) and return its facts; no cache involved."""
    import gguf  # noqa: F401 - first, as always: without the 'llamacpp' extra this fails before any check

    spec.check()
    texts = corpus() if texts is None else texts
    tool_versions = versions()
    tokens, merges = train_tokenizer(texts, spec.vocab)
    supp = suppressed(tokens, spec.allow_lt)
    tensors = weights(spec, logit_bias(spec, supp))

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        _write_gguf(tmp, spec, tokens, merges, tensors)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {
        "spec": dataclasses.asdict(spec),
        "versions": tool_versions,
        "text_files": list(CORPUS_FILES),
        "text_sha256": text_hashes(texts),
        "python": sys.version.split()[0],
        "merges": len(merges),
        "suppressed": int(sum(supp)),
        "tensors": len(tensors),
        "bytes": dest.stat().st_size,
        "sha256": _sha256(dest),
    }


def _write_gguf(
    path: str, spec: TinySpec, tokens: list[str], merges: list[str], tensors: dict[str, Any]
) -> None:
    """The llama GGUF: metadata, the gpt2-style tokenizer, the chat template, then the F32 tensors."""
    import gguf

    w = gguf.GGUFWriter(path, "llama")
    w.add_name(spec.name)
    w.add_file_type(0)  # all F32
    w.add_vocab_size(spec.vocab)
    w.add_context_length(spec.context)
    w.add_embedding_length(spec.embedding)
    w.add_block_count(spec.layers)
    w.add_feed_forward_length(spec.ff)
    w.add_head_count(spec.heads)
    w.add_head_count_kv(spec.kv_heads)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([3 if i < len(SPECIALS) else 1 for i in range(spec.vocab)])
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_pad_token_id(PAD_ID)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
