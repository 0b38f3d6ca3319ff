"""Test tiers, derived from what a test uses (tests/conftest.py marks every collected test with them).

    pure      none of the below: no engine, no sshd node, no notebook kernel (it may run a short command)
    sim       labkit's simulated engine (a sim lane, SimOracle, SimProcess)
    ssh       the sshd nodes (the `cluster` fixture and every fixture built on it, the netns cluster)
    notebook  a notebook kernel (papermill, labkit.notebooks, `labkit run`)
    llamacpp  the llama.cpp CPU engine
    vllm      the vLLM CPU engine
    docker    a real Docker daemon

A test's tiers come from the fixtures it requests (their closure, so a fixture built on `cluster` counts) and
from the code it reaches in its own module: its body, its decorators, the module's `pytestmark`, and the
module-level functions, fixtures and constants those name, followed to the end. Each `tests.support` or
labkit module that code imports from below gives its tier, and so does each fixture defined in one of them, so
a helper or fixture added to such a module is tiered without a list per test. A test that runs papermill or
`labkit run` as a command is seen by the literal strings of that command.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import cache
from pathlib import Path

TIERS = ("pure", "sim", "ssh", "notebook", "llamacpp", "vllm", "docker")

# a module (or package) a test's code imports from -> the tier it puts the test in
TIER_OF_MODULE = {
    "tests.support.lanes": "sim",
    "tests.support.sim": "sim",
    "labkit.sim.oracle": "sim",
    "labkit.sim.process": "sim",
    "tests.support.telemetry_nodes": "ssh",
    "tests.support.netns": "ssh",
    "papermill": "notebook",
    "labkit.notebooks": "notebook",
    "tests.support.llamacpp": "llamacpp",
    "tests.support.vllm": "vllm",
    "tests.support.vllm_lanes": "vllm",
    "tests.support.vllm_fixtures": "vllm",
    "tests.support.docker_real": "docker",
}
# fixtures of tests/conftest.py by name (every node fixture requests `cluster`)
TIER_OF_FIXTURE = {"cluster": "ssh"}
# the fixture that holds the committed lab record: its tests get the `record` marker (not a tier)
RECORD_FIXTURE = "committed_record"


def tier_of_module(name: str) -> str | None:
    """The tier of module `name`: its own entry or its nearest listed parent package's."""
    while name:
        if name in TIER_OF_MODULE:
            return TIER_OF_MODULE[name]
        name = name.rpartition(".")[0]
    return None


class ModuleCode:
    """One test module's top-level definitions, what each names and imports, and its always-applied code."""

    def __init__(self, source: str):
        tree = ast.parse(source)
        self.imported: dict[str, str] = {}  # local name -> module it comes from
        self.defs: dict[str, list[ast.AST]] = {}  # top-level function, class or assigned name -> its nodes
        self.always: list[ast.AST] = []  # `pytestmark = ...`: applies to every test of the module
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                for local, module in _imports(node):
                    self.imported[local] = module
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.defs.setdefault(node.name, []).append(node)
            elif isinstance(node, ast.Assign | ast.AnnAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        self.defs.setdefault(t.id, []).append(node)
                        if t.id == "pytestmark":
                            self.always.append(node)

    def tiers(self, names: Iterable[str]) -> set[str]:
        """The tiers of the code reached from these top-level names and the module's `pytestmark`."""
        seen: set[str] = set()
        todo = [*names, *(["pytestmark"] if self.always else [])]
        modules: set[str] = set()
        strings: list[tuple[str, ...]] = []
        while todo:
            name = todo.pop()
            if name in seen or name not in self.defs:
                continue
            seen.add(name)
            for node in self.defs[name]:
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Name):
                        if sub.id in self.imported:
                            modules.add(self.imported[sub.id])
                        todo.append(sub.id)
                    elif isinstance(sub, ast.Import | ast.ImportFrom):
                        modules.update(module for _, module in _imports(sub))
                    elif isinstance(sub, ast.List | ast.Tuple):
                        strings.append(tuple(e.value for e in sub.elts if isinstance(e, ast.Constant)))
                    elif isinstance(sub, ast.Constant) and sub.value == "papermill":
                        strings.append(("papermill",))
        found = {t for t in map(tier_of_module, modules) if t}
        if any("papermill" in s or _labkit_run(s) for s in strings):
            found.add("notebook")
        return found


def _imports(node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """(local name, module) for each name an import statement binds; a `from` of a package's submodule
    (`from tests.support import lanes`) counts as that submodule."""
    if isinstance(node, ast.Import):
        return [(a.asname or a.name.split(".")[0], a.name) for a in node.names]
    base = node.module or ""
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.append((a.asname or a.name, sub if tier_of_module(sub) and not tier_of_module(base) else base))
    return out


def _labkit_run(strings: tuple[str, ...]) -> bool:
    """`labkit run ...` as an argv: "labkit" then "run"."""
    return any(a == "labkit" and b == "run" for a, b in zip(strings, strings[1:], strict=False))


@cache
def module_code(path: Path) -> ModuleCode:
    return ModuleCode(path.read_text(encoding="utf-8"))


def tiers_of_test(path: Path, function: str, fixtures: dict[str, Iterable[str]]) -> set[str]:
    """The tiers of test `function` of the module at `path`; `fixtures` maps each fixture in the test's
    closure to the modules defining it. Never empty: a test with no other tier is `pure`."""
    code = module_code(path)
    found = code.tiers([function, *(f for f in fixtures if f in code.defs)])
    for name, modules in fixtures.items():
        if name in TIER_OF_FIXTURE:
            found.add(TIER_OF_FIXTURE[name])
        found.update(t for t in map(tier_of_module, modules) if t)
    return found or {"pure"}
