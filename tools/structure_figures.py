"""Prints the structure figures issue 24 asks for: the largest module, modules over 350 lines, names
exported per package, and parameters without an annotation or annotated `Any` (self/cls not counted).

Usage: python tools/structure_figures.py [ROOT]   (ROOT defaults to labkit/)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    args = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    if a.vararg:
        args.append(a.vararg)
    if a.kwarg:
        args.append(a.kwarg)
    return [p for p in args if p.arg not in ("self", "cls")]


def _is_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    text = ast.unparse(node).strip("'\"")
    return text in ("Any", "typing.Any")


def figures(root: Path) -> dict[str, object]:
    lines: dict[str, int] = {}
    exported: dict[str, int] = {}
    unannotated = any_typed = 0
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        rel = str(path.relative_to(root.parent))
        lines[rel] = len(text.splitlines())
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for p in _params(node):
                    if p.annotation is None:
                        unannotated += 1
                    elif _is_any(p.annotation):
                        any_typed += 1
        if path.name == "__init__.py":
            for node in tree.body:
                if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
                ):
                    value = node.value
                    if isinstance(value, (ast.List, ast.Tuple)):
                        exported[str(path.parent.relative_to(root.parent))] = len(value.elts)
    largest = max(lines.items(), key=lambda kv: kv[1])
    over = sorted(((n, c) for n, c in lines.items() if c > 350), key=lambda kv: -kv[1])
    return {
        "largest module": f"{largest[0]} ({largest[1]} lines)",
        "modules over 350 lines": len(over),
        "watch list": ", ".join(f"{n} {c}" for n, c in over) or "none",
        "exported names": f"{sum(exported.values())} in {len(exported)} __all__ lists",
        "per package": ", ".join(f"{n} {c}" for n, c in sorted(exported.items())),
        "unannotated parameters": unannotated,
        "Any parameters": any_typed,
    }


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "labkit"
    for key, value in figures(root).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
