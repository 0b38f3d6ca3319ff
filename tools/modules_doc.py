"""Rewrite the module lists of docs/architecture.md (between its `modules:<package>` markers) from the code: per
package and subfolder, each module with the first sentence of its docstring; tests/test_layout.py fails until
this has been run after a module is added, moved, renamed or has its docstring's first sentence changed.

    .venv/bin/python tools/modules_doc.py
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tools.docgen import REPO, rewrite  # noqa: E402

DOC = REPO / "docs" / "architecture.md"
PKG = REPO / "labkit"
# A sentence ends at `.`, `!` or `?` before a space and a capital, a backquote or a parenthesis; "e.g." does not.
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)[.!?](?=\s+[A-Z`(]|\s*$)")


def first_sentence(path: Path) -> str:
    """The first sentence of a module's docstring (its first paragraph, on one line); a dash without one."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
    para = " ".join(doc.split("\n\n", 1)[0].split())
    end = SENTENCE_END.search(para)
    return (para[: end.start() + 1] if end else para) or "—"


def entries(folder: Path, depth: int = 0) -> list[str]:
    """One list item per module of `folder`, then per subfolder (its `__init__`'s sentence, its modules nested)."""
    pad = "  " * depth
    lines = [
        f"{pad}- `{p.name}`: {first_sentence(p)}"
        for p in sorted(folder.glob("*.py"))
        if p.name not in ("__init__.py", "__main__.py")
    ]
    for sub in sorted(p for p in folder.iterdir() if (p / "__init__.py").exists()):
        lines.append(f"{pad}- `{sub.name}/`: {first_sentence(sub / '__init__.py')}")
        lines += entries(sub, depth + 1)
    return lines


def module_lists(root: Path = PKG) -> dict[str, str]:
    """`modules:<package>` -> its generated list, for every package directly under labkit/."""
    return {
        f"modules:{p.name}": "\n".join(entries(p))
        for p in sorted(root.iterdir())
        if (p / "__init__.py").exists()
    }


if __name__ == "__main__":
    changed = rewrite(DOC, module_lists())
    print(f"{DOC}: rewrote {', '.join(changed) or 'nothing (the lists were current)'}")
