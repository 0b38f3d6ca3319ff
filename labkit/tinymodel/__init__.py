"""The tiny model builder: a preset name in, a small deterministic random-weight model on disk out (built
offline, cached), so real engines can run on CPU without downloading anything.
"""

from labkit.tinymodel.build import (
    ModelBuildError,
    TinySpec,
    ensure,
    facts,
    is_built_model,
    materialize,
    preset,
)

__all__ = ["ModelBuildError", "TinySpec", "ensure", "facts", "is_built_model", "materialize", "preset"]
