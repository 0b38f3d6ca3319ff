"""Prints the structure figures issues 24 and 36 ask for: the largest module, modules over 350 lines, modules per
package (subpackages counted with their parent), names exported per package, parameters without an annotation,
annotated `Any` or mentioning `Any` (self/cls not counted), bare `dict` annotations (no key and value types), the
files a new workload touches (counted by the test-only workload of tests/measure/test_workload_proof.py: every
file of the checkout that names it), and, given a pytest log run with --durations, its slowest tests.

Usage: python tools/structure_figures.py [ROOT] [--pytest-log FILE]   (ROOT defaults to labkit/)
"""

from __future__ import annotations

import ast
import re
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


def _mentions_any(node: ast.expr | None) -> bool:
    return node is not None and any(
        isinstance(n, ast.Name) and n.id == "Any" or isinstance(n, ast.Attribute) and n.attr == "Any"
        for n in ast.walk(node)
    )


def _bare_dicts(node: ast.expr | None) -> int:
    """`dict` used without its key and value types anywhere in an annotation (`dict`, `dict | None`)."""
    if node is None:
        return 0
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        try:
            node = ast.parse(node.value, mode="eval").body
        except SyntaxError:
            return 0
    subscripted = {id(n.value) for n in ast.walk(node) if isinstance(n, ast.Subscript)}
    return sum(
        1 for n in ast.walk(node) if isinstance(n, ast.Name) and n.id == "dict" and id(n) not in subscripted
    )


def _annotations(tree: ast.Module) -> list[ast.expr]:
    out: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out += [p.annotation for p in _params(node) if p.annotation is not None]
            if node.returns is not None:
                out.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            out.append(node.annotation)
    return out


def figures(root: Path) -> dict[str, object]:
    lines: dict[str, int] = {}
    exported: dict[str, int] = {}
    modules: dict[str, int] = {}
    unannotated = any_typed = mentions_any = bare_dicts = 0
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        rel = str(path.relative_to(root.parent))
        lines[rel] = len(text.splitlines())
        parts = path.relative_to(root).parts
        package = parts[0] if len(parts) > 1 else "(top level)"
        modules[package] = modules.get(package, 0) + 1
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for p in _params(node):
                    if p.annotation is None:
                        unannotated += 1
                    elif _is_any(p.annotation):
                        any_typed += 1
                    mentions_any += _mentions_any(p.annotation)
        bare_dicts += sum(_bare_dicts(a) for a in _annotations(tree))
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
        "modules": f"{len(lines)} ({sum(lines.values())} lines)",
        "modules per package": ", ".join(f"{n} {c}" for n, c in sorted(modules.items())),
        "largest module": f"{largest[0]} ({largest[1]} lines)",
        "modules over 350 lines": len(over),
        "watch list": ", ".join(f"{n} {c}" for n, c in over) or "none",
        "exported names": f"{sum(exported.values())} in {len(exported)} __all__ lists",
        "per package": ", ".join(f"{n} {c}" for n, c in sorted(exported.items())),
        "unannotated parameters": unannotated,
        "Any parameters": any_typed,
        "parameters mentioning Any": mentions_any,
        "bare dict annotations": bare_dicts,
    }


PROOF = Path("tests/measure/test_workload_proof.py")  # a workload defined entirely inside the test
SEARCHED = ("labkit", "tests", "docs", "recipes", "notebooks", "tools", "results/tables.toml")


def workload_files(repo: Path) -> str:
    """The files that name the test-only workload (its registry name, PHASE in the proof test): a workload that
    is one place is named by its own file alone."""
    found = (
        re.search(r'^PHASE = "(\w+)"', (repo / PROOF).read_text(), re.M) if (repo / PROOF).is_file() else None
    )
    if found is None:
        return "not counted (no test-only workload)"
    name, files = found.group(1), []
    for top in SEARCHED:
        for path in sorted((repo / top).rglob("*") if (repo / top).is_dir() else [repo / top]):
            if (
                path.is_file()
                and path.suffix in (".py", ".toml", ".md", ".ipynb")
                and path.name != Path(__file__).name
            ) and name in path.read_text(errors="replace"):
                files.append(str(path.relative_to(repo)))
    return f"{len(files)} ({', '.join(files)})"


def slowest_tests(log: str, n: int = 25) -> list[str]:
    """The `--durations` lines of a pytest log ("12.34s call tests/..."), slowest first."""
    found = re.findall(r"^(\d+\.\d+)s (call|setup|teardown) +(\S+)", log, re.M)
    ranked = sorted(found, key=lambda f: -float(f[0]))[:n]
    return [f"{float(s):8.2f}s {phase:8} {test}" for s, phase, test in ranked]


def main() -> None:
    args = sys.argv[1:]
    log = None
    if "--pytest-log" in args:
        i = args.index("--pytest-log")
        log = Path(args[i + 1]).read_text(errors="replace")
        del args[i : i + 2]
    root = Path(args[0]) if args else Path(__file__).resolve().parents[1] / "labkit"
    for key, value in figures(root).items():
        print(f"{key}: {value}")
    print(f"files a new workload touches (the test-only workload): {workload_files(root.parent)}")
    if log is not None:
        print("slowest tests:")
        for line in slowest_tests(log):
            print(f"  {line}")


if __name__ == "__main__":
    main()
