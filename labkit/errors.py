"""Error types shown to users: each names the file, key, node or endpoint it is about."""

from __future__ import annotations


class LabkitError(Exception):
    """Base for every error labkit reports to a user (the CLI prints it without a traceback)."""


class RecipeError(LabkitError):
    """A recipe is malformed: names the file and the dotted key path."""

    def __init__(self, file: str, key: str, message: str):
        self.file = str(file)
        self.key = key
        self.message = message
        where = f"{self.file}: {key}: " if key else f"{self.file}: "
        super().__init__(where + message)


class NodeError(LabkitError):
    """One or more nodes failed: maps node name -> reason."""

    def __init__(self, what: str, failures: dict[str, str]):
        self.what = what
        self.failures = dict(failures)
        lines = [f"{what}: {len(failures)} node(s) failed"]
        lines += [f"  {node}: {reason}" for node, reason in failures.items()]
        super().__init__("\n".join(lines))
