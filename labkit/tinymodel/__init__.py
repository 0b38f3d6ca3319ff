"""The tiny model builder: a preset name in, a small deterministic random-weight model on disk out (built
offline, cached), so real engines can run on CPU without downloading anything.

spec (parameters, presets, token ids) -> inputs (training text, versions, cache key) -> tokenizer, weights ->
write (one GGUF file and its facts) -> build (the cache: ensure, facts, materialize a plan's model path).
"""

from labkit.tinymodel.build import ensure, facts, materialize
from labkit.tinymodel.spec import ModelBuildError, TinySpec, preset

__all__ = ["ModelBuildError", "TinySpec", "ensure", "facts", "materialize", "preset"]
