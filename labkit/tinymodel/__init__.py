"""The tiny model builder: a preset name in, a small deterministic random-weight model on disk out (built
offline, cached), so real engines can run on CPU without downloading anything: one GGUF file for llama.cpp,
or an HF model directory (config, BF16 safetensors, tokenizer) for vLLM and SGLang, from the same tokenizer
training and the same weights.

spec (parameters, presets, token ids) -> inputs (training text, versions, cache key) -> tokenizer, weights ->
write (one GGUF file and its facts) | hf with safetensors_file (one HF directory and its facts) -> build (the
cache: ensure, facts, model_path, materialize a plan's model path in the format its engine loads).
"""

from labkit.tinymodel.build import ensure, facts, materialize

__all__ = [
    "ensure",
    "facts",
    "materialize",
]
