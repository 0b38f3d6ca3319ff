"""What a tiny model is: builder parameters (`TinySpec`), the named presets, the fixed token ids and template.

Every field of a spec goes into the cache key, so two specs that differ in anything build two models.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.errors import LabkitError
from labkit.recipe import BUILT_MODEL_PREFIX

BUILDER_VERSION = 1
HF_WRITER_VERSION = 1  # labkit.tinymodel.hf: bump when the HF files' bytes change
FORMATS = ("gguf", "hf")  # one GGUF file (llama.cpp); an HF model directory (vLLM, SGLang)
REPO_PREFIX = BUILT_MODEL_PREFIX  # recipes name a built model as model.repo = "labkit/<preset>"
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2
BOS_ID, EOS_ID, PAD_ID = 0, 2, 0
SUPPRESS_BIAS = -40.0
MAX_PIECE_BYTES = 32  # llama-cpp-python detokenises one piece into a 32-byte buffer
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ModelBuildError(LabkitError):
    """The tiny model could not be built: names the missing file, package or bad parameter."""


@dataclass(frozen=True)
class TinySpec:
    """Builder parameters; every field goes into the cache key."""

    name: str = "tiny-llama"
    vocab: int = 2048
    embedding: int = 128
    layers: int = 4
    heads: int = 4
    kv_heads: int = 4
    ff: int = 384
    context: int = 32768
    eos_bias: float = SUPPRESS_BIAS  # about +6 makes EOS likely (stops after ~5 tokens)
    seed: int = 0
    allow_lt: bool = False  # allow pieces containing '<' (they can be held back in chat streams)

    def check(self) -> None:
        if self.vocab < 300:
            raise ModelBuildError(
                f"tiny model {self.name}: vocab {self.vocab} < 300 (256 bytes + specials + merges)"
            )
        if self.embedding % self.heads or self.heads % self.kv_heads:
            raise ModelBuildError(
                f"tiny model {self.name}: embedding {self.embedding} must divide by heads "
                f"{self.heads}, and heads by kv_heads {self.kv_heads}"
            )
        if min(self.layers, self.ff, self.context, self.heads, self.kv_heads) < 1:
            raise ModelBuildError(f"tiny model {self.name}: layers, ff, context and heads must be >= 1")

    @property
    def head_dim(self) -> int:
        return self.embedding // self.heads


PRESETS: dict[str, TinySpec] = {
    "tiny-llama": TinySpec(),
    "tiny-llama-small": TinySpec(name="tiny-llama-small", embedding=64, layers=2, ff=192),
    "tiny-llama-eos": TinySpec(name="tiny-llama-eos", eos_bias=6.0),
}


def preset(name: str) -> TinySpec:
    """A named spec; accepts 'tiny-llama' or the recipe form 'labkit/tiny-llama'."""
    key = name.removeprefix(REPO_PREFIX)
    if key not in PRESETS:
        raise ModelBuildError(f"no tiny model preset '{name}'; known: {', '.join(PRESETS)}")
    return PRESETS[key]
