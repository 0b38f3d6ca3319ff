"""The tree shows the pipeline: imports go one way, nothing reaches into another module's private names,
modules stay small, settings are read in one place, and the README names every package.

The layering rule is written out in docs/architecture.md; RANKS below is that rule as data.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tools.docgen import markers, replaced, section
from tools.modules_doc import module_lists

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "labkit"

# Pipeline order: a component may import only components of a lower rank (and itself).
RANKS = {
    "base": 0,  # labkit/__init__, errors, settings, units, progress
    "recipe": 1,
    "roofline": 1,  # the checkpoint's bytes per step and the ceiling: pure, beside recipe (neither imports the other)
    "nodes": 2,
    "stage": 3,
    "serve": 3,
    "measure": 4,
    "store": 5,
    "report": 6,
    "exchange": 6,  # other tools' result files in (stored runs) and out; beside report, neither imports the other
    "notebooks": 7,
    "lab": 8,
    "cli": 9,
}
BASE = {"labkit", "errors", "settings", "units", "progress", "measures"}
# Side components: what they may import, and who may import them.
SIDE_IMPORTS = {"sim": {"base"}, "tinymodel": {"base", "recipe"}}
SIDE_USERS = {"notebooks", "lab", "cli"}
# Classes and functions stay small; modules have no line limit (docs/architecture.md, "The layering rule")
MAX_CLASS, MAX_FUNCTION = 250, 80


@dataclass
class Module:
    name: str
    path: Path
    tree: ast.Module
    is_package: bool
    imports: list[tuple[str, list[str], int]] = field(default_factory=list)  # (module, names, line)
    # imports inside `if TYPE_CHECKING:` blocks: annotations only, never run, so no edge for the cycle check;
    # they still go one way and through the package's __init__
    type_imports: list[tuple[str, list[str], int]] = field(default_factory=list)


def rel(path: Path) -> Path:
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


def component(mod: str) -> str:
    parts = mod.split(".")
    if len(parts) == 1 or parts[1] in BASE:
        return "base"
    if parts[1] == "__main__":
        return "cli"
    return parts[1]


def load_modules(root: Path = PKG) -> dict[str, Module]:
    mods = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        parts = list(rel.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        name = ".".join(parts)
        mods[name] = Module(name, path, ast.parse(path.read_text(), str(path)), is_package)
    for m in mods.values():
        typing_only = {id(n) for block in type_checking_blocks(m.tree) for n in ast.walk(block)}
        for node in ast.walk(m.tree):  # function-level imports count too
            into = m.type_imports if id(node) in typing_only else m.imports
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "labkit" or node.module.startswith("labkit."):
                    into.append((node.module, [a.name for a in node.names], node.lineno))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "labkit" or a.name.startswith("labkit."):
                        into.append((a.name, [], node.lineno))
    for m in mods.values():  # `from labkit import report` imports the module labkit.report
        m.imports = expand_package_imports(mods, m.imports)
        m.type_imports = expand_package_imports(mods, m.type_imports)
    return mods


def type_checking_blocks(tree: ast.Module) -> list[ast.If]:
    """The bodies of `if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`) statements, never run at import time."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = (
                test.id
                if isinstance(test, ast.Name)
                else test.attr
                if isinstance(test, ast.Attribute)
                else ""
            )
            if name == "TYPE_CHECKING":
                out.extend(node.body)
    return out


def expand_package_imports(
    mods: dict[str, Module], imports: list[tuple[str, list[str], int]]
) -> list[tuple[str, list[str], int]]:
    """`from labkit import report` imports the module labkit.report; other imports stay as they are."""
    return [
        item
        for target, names, line in imports
        for item in (
            [(f"labkit.{n}", [], line) for n in names if f"labkit.{n}" in mods]
            + (
                [(target, [n for n in names if f"labkit.{n}" not in mods], line)]
                if any(f"labkit.{n}" not in mods for n in names)
                else []
            )
            if target == "labkit"
            else [(target, names, line)]
        )
    ]


def edges(mods: dict[str, Module]) -> dict[str, set[str]]:
    """module -> modules whose code importing it runs. `from P import x` where x is a submodule of P runs P's
    __init__ as well, unless the importer is inside P (P is then already being imported)."""
    out: dict[str, set[str]] = {name: set() for name in mods}
    for m in mods.values():
        own_pkg = m.name if m.is_package else m.name.rpartition(".")[0]
        for target, names, _ in m.imports:
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in mods]
            inside = own_pkg == target or own_pkg.startswith(target + ".")
            runs_init = not subs or not inside or len(subs) < len(names)
            if runs_init and target in mods and target != m.name:
                out[m.name].add(target)
            out[m.name].update(s for s in subs if s != m.name)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def upward_imports(mods: dict[str, Module]) -> list[str]:
    bad = []
    for m in mods.values():
        src = component(m.name)
        for target, _, line in m.imports + m.type_imports:
            dst = component(target)
            if dst == src or dst == "base":
                continue
            where = f"{rel(m.path)}:{line}: {src} imports {dst} ({target})"
            if dst in SIDE_IMPORTS:
                if src not in SIDE_USERS:
                    bad.append(where + f" - {dst} is for {', '.join(sorted(SIDE_USERS))} and tests only")
            elif src in SIDE_IMPORTS:
                if dst not in SIDE_IMPORTS[src]:
                    bad.append(where + f" - {src} may import only {', '.join(sorted(SIDE_IMPORTS[src]))}")
            elif RANKS[dst] >= RANKS[src]:
                bad.append(
                    where
                    + " - imports go recipe > nodes > stage/serve > measure > store > report > lab > cli"
                )
    return bad


def cross_package_submodule_imports(mods: dict[str, Module]) -> list[str]:
    """Another package is used through its __init__ (its public API), never through its submodules."""
    bad = []
    for m in mods.values():
        src = component(m.name)
        for target, names, line in m.imports + m.type_imports:
            dst = component(target)
            if dst in (src, "base"):
                continue
            pkg = "labkit." + dst
            reaches = target != pkg or any(
                f"{pkg}.{n}" in mods and not hasattr_init(mods, pkg, n) for n in names
            )
            if reaches:
                bad.append(f"{rel(m.path)}:{line}: {target} {names} - import from {pkg} instead")
    return bad


def hasattr_init(mods: dict[str, Module], pkg: str, name: str) -> bool:
    """True when the package's __init__ binds `name` itself (re-exports it), so `from pkg import name` is API."""
    init = mods[pkg].tree
    return any(
        isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names)
        for node in ast.walk(init)
    )


def private_imports(mods: dict[str, Module]) -> list[str]:
    bad = []
    for m in mods.values():
        aliases: dict[str, str] = {}
        for node in ast.walk(m.tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("labkit"):
                for a in node.names:
                    if a.name.startswith("_") and not a.name.startswith("__") and node.module != m.name:
                        bad.append(f"{rel(m.path)}:{node.lineno}: imports {node.module}.{a.name}")
                    if f"{node.module}.{a.name}" in mods or node.module == "labkit":
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
        for node in ast.walk(m.tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                bad.append(f"{rel(m.path)}:{node.lineno}: uses {aliases[node.value.id]}.{node.attr}")
    return bad


def oversized(mods: dict[str, Module]) -> list[str]:
    bad = []
    for m in mods.values():
        where = rel(m.path)
        for node in ast.walk(m.tree):
            size = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "end_lineno") else 0
            if isinstance(node, ast.ClassDef) and size > MAX_CLASS:
                bad.append(f"{where}:{node.lineno}: class {node.name} {size} lines (at most {MAX_CLASS})")
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and size > MAX_FUNCTION:
                bad.append(f"{where}:{node.lineno}: def {node.name} {size} lines (at most {MAX_FUNCTION})")
    return bad


def environment_reads(mods: dict[str, Module]) -> list[str]:
    """`os.environ.get("LABKIT_X")`, `env["LABKIT_X"]`, `os.getenv(...)` anywhere but labkit/settings.py."""
    bad = []
    for m in mods.values():
        if m.name == "labkit.settings":
            continue
        for node in ast.walk(m.tree):
            key = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if node.func.attr in ("get", "getenv", "pop") and isinstance(node.args[0], ast.Constant):
                    key = node.args[0].value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                key = node.slice.value
            if isinstance(key, str) and re.fullmatch(r"(LABKIT|OPENAI|PAPERMILL)_[A-Z_]+", key):
                bad.append(f"{rel(m.path)}:{node.lineno}: reads {key} (use labkit.settings)")
    return bad


REFERENCE_DOCS = (
    "engines",
    "measurement",
    "anchors",
    "ecosystem",
    "llamacpp",
    "vllm-cpu",
    "sparks-launch",
    "test-nodes",
)


# In a .toml comment: a path of this repo (a template such as results/<recipe>/ is checked up to its first
# `<`), and a Markdown file beside the .toml (NOTE.md), optionally with a heading.
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:labkit|docs|recipes|results|tests|benchmarks|notebooks|tools)/[\w./-]*)"
)
SIBLING_DOC = re.compile(r'(?<![\w./-])([\w-]+\.md)\b(?:, "([^"]+)")?')
TOML_CODE = re.compile(r"""(?:[^"'#]|"(?:[^"\\]|\\.)*"|'[^']*')*""")  # a line up to its comment


def toml_comment(line: str) -> str:
    """The comment of one TOML line: the text after the first `#` outside a string (`"#x"` is a value)."""
    code = TOML_CODE.match(line)
    rest = line[code.end() :] if code else ""
    return rest[1:] if rest.startswith("#") else ""


def toml_citations(path: Path) -> list[str]:
    """The repo paths and sibling docs a .toml file's comments cite that do not exist."""
    bad = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        comment = toml_comment(line)
        for hit in REPO_PATH.finditer(comment):
            cited = hit.group(1).rstrip(".")
            if not (REPO / cited).exists():
                bad.append(f"{rel(path)}:{n}: cites {cited}, which does not exist")
        for hit in SIBLING_DOC.finditer(comment):
            doc = path.parent / hit.group(1)
            if hit.group(1).removesuffix(".md") in REFERENCE_DOCS:
                continue  # reported by outside_citations
            if not doc.exists():
                bad.append(f"{rel(path)}:{n}: cites {hit.group(1)}, which is not beside it")
            elif hit.group(2) and f"## {hit.group(2)}\n" not in doc.read_text():
                bad.append(f"{rel(path)}:{n}: cites a heading {hit.group(1)} does not have: {hit.group(2)}")
    return bad


SHARED = re.compile(r"\bshared/(?:reference|seed)/[\w.-]*")  # the team's folder beside the repo, not in it


def outside_citations(paths: list[Path]) -> list[str]:
    """Cited facts live in this repo's docs/: a bare reference file name (from outside the repo) is not
    here, and a cited `docs/<file>.md, "<heading>"` must exist with that heading; a .toml file's comments
    also cite only paths that exist (`toml_citations`)."""
    bad = []
    bare = re.compile(rf"(?<![\w/])({'|'.join(map(re.escape, REFERENCE_DOCS))})\.md\b")
    cited = re.compile(
        r'\bdocs/([a-z][\w.-]*\.md)(?:, "([^"]+)")?'
    )  # lower-case: ours (another repo's docs/NETWORKING.md is its own)
    for path in paths:
        text = path.read_text()
        if path.suffix == ".toml":
            bad += toml_citations(path)
        for n, line in enumerate(text.splitlines(), 1):
            # in docs/ a bare name is the file beside it; elsewhere it names a reference file outside the repo
            hits = [] if path.suffix == ".md" else list(bare.finditer(line))
            for hit in hits + list(SHARED.finditer(line)):
                bad.append(f"{rel(path)}:{n}: cites {hit.group(0)} (point to docs/ of this repo)")
            for hit in cited.finditer(line):
                doc = REPO / "docs" / hit.group(1)
                if not doc.exists():
                    bad.append(f"{rel(path)}:{n}: cites docs/{hit.group(1)}, which does not exist")
                elif hit.group(2) and f"## {hit.group(2)}\n" not in doc.read_text():
                    bad.append(
                        f"{rel(path)}:{n}: cites a heading docs/{hit.group(1)} does not have: {hit.group(2)}"
                    )
    return bad


def stale_module_lists(doc: str, lists: dict[str, str]) -> list[str]:
    """The generated module lists (tools/modules_doc.py) that `doc` lacks or shows as an earlier generation wrote them."""
    return [name for name, body in lists.items() if markers(name)[0] not in doc or section(doc, name) != body]


def step_table(readme: str) -> str:
    """The README's table of pipeline steps (the lines from `| step |` to the first non-table line)."""
    lines = readme.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| step"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def top_level_entries(root: Path = PKG) -> list[str]:
    out = []
    for p in sorted(root.iterdir()):
        if p.is_dir() and (p / "__init__.py").exists():
            out.append(f"labkit/{p.name}/")
        elif p.suffix == ".py" and p.name not in ("__init__.py", "__main__.py"):
            out.append(f"labkit/{p.name}")
    return out


def exported(m: Module) -> list[str] | None:
    """A package's `__all__` as written (a literal list or tuple of strings), None without one."""
    for node in m.tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
            and isinstance(node.value, ast.List | ast.Tuple)
        ):
            return [e.value for e in node.value.elts if isinstance(e, ast.Constant)]
    return None


def export_order(name: str) -> tuple[int, str]:
    """The order `__all__` is kept in (ruff's RUF022, isort style): CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def unsorted_exports(mods: dict[str, Module]) -> list[str]:
    bad = []
    for m in mods.values():
        names = exported(m)
        if names is not None and names != sorted(names, key=export_order):
            bad.append(f"{rel(m.path)}: __all__ is not sorted (constants, classes, functions; each A-Z)")
    return bad


def shadowing_exports(mods: dict[str, Module]) -> list[str]:
    """An exported name that is also a submodule's name but bound to something else (`serve.preflight` the
    function hiding `serve/preflight.py`): `labkit.serve.preflight` then means two things."""
    bad = []
    for m in mods.values():
        for name in exported(m) or []:
            sub = f"{m.name}.{name}"
            if sub in mods and not binds_module(m, name, sub):
                bad.append(f"{rel(m.path)}: exports {name!r}, which shadows the submodule {sub}")
    return bad


def binds_module(m: Module, name: str, sub: str) -> bool:
    """True when the package binds `name` to the submodule itself (`from labkit.report import plots`)."""
    parent, _, last = sub.rpartition(".")
    for node in m.tree.body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == parent
            and any(a.name == last and (a.asname or a.name) == name for a in node.names)
        ):
            return True
        if isinstance(node, ast.Import) and any(a.name == sub and a.asname == name for a in node.names):
            return True
    return False


def names_used_from(pkg: str, tree: ast.Module) -> set[str]:
    """Names `tree` takes from package `pkg`: `from pkg import x`, and `alias.x` where alias is pkg itself
    (`from labkit import report`, `import labkit.report as r`, `labkit.report.x`)."""
    parent, _, last = pkg.rpartition(".")
    used: set[str] = set()
    aliases = {pkg}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            if node.module == pkg:
                used.update(a.name for a in node.names)
            elif node.module == parent:
                aliases.update(a.asname or a.name for a in node.names if a.name == last)
        elif isinstance(node, ast.Import):
            aliases.update(a.asname for a in node.names if a.name == pkg and a.asname)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in aliases:
            used.add(node.attr)
    return used


def notebook_trees(root: Path = REPO / "notebooks") -> list[ast.Module]:
    """Each notebook template's code cells as one module (cells share their imports), magics left out."""
    import json

    trees = []
    for path in sorted(root.glob("*.ipynb")):
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        lines = "\n".join("".join(c["source"]) for c in cells).splitlines()
        trees.append(ast.parse("\n".join(x for x in lines if not x.lstrip().startswith(("%", "!")))))
    return trees


def unused_exports(mods: dict[str, Module], outside: list[ast.Module]) -> list[str]:
    """Exported names no other labkit package and no notebook uses: they belong in the submodule (tests may
    import submodules), not in the package's public surface."""
    bad = []
    for m in mods.values():
        names = exported(m) if m.is_package else None
        if not names:
            continue
        users = [o.tree for o in mods.values() if o.name != m.name and not o.name.startswith(m.name + ".")]
        used = set().union(*(names_used_from(m.name, t) for t in users + outside))
        bad.extend(
            f"{rel(m.path)}: exports {n!r}, used by no other package or notebook"
            for n in names
            if n not in used
        )
    return bad


def entry_points() -> list[ast.Module]:
    """`[project.scripts]` as code, so the console script's target counts as used."""
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"].get("scripts", {})
    return [ast.parse(f"from {t.split(':')[0]} import {t.split(':')[1]}") for t in scripts.values()]


# ---- the checks ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mods():
    return load_modules()


def test_no_import_cycles(mods):
    assert cycles(edges(mods)) == []


def test_imports_go_one_way(mods):
    assert upward_imports(mods) == []


def test_other_packages_are_used_through_their_init(mods):
    assert cross_package_submodule_imports(mods) == []


def test_no_module_imports_another_modules_private_names(mods):
    assert private_imports(mods) == []


def test_modules_classes_and_functions_stay_small(mods):
    assert oversized(mods) == []


def test_every_export_list_is_sorted(mods):
    assert unsorted_exports(mods) == []


def test_no_exported_name_shadows_a_submodule(mods):
    assert shadowing_exports(mods) == []


def test_packages_export_only_what_other_packages_and_notebooks_use(mods):
    assert unused_exports(mods, notebook_trees() + entry_points()) == []


def test_environment_is_read_only_in_settings(mods):
    assert environment_reads(mods) == []


def test_every_package_says_what_comes_in_and_goes_out(mods):
    missing = [m.name for m in mods.values() if m.is_package and not ast.get_docstring(m.tree)]
    assert missing == []


def test_architecture_doc_module_lists_are_generated():
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert stale_module_lists(doc, module_lists()) == [], (
        "docs/architecture.md's module lists drifted from the code: run .venv/bin/python tools/modules_doc.py"
    )


def test_docstrings_cite_only_docs_in_this_repo():
    paths = (
        sorted(PKG.rglob("*.py"))
        + sorted((REPO / "benchmarks").glob("*.py"))
        + sorted((REPO / "tests").rglob("*.py"))
        + sorted(PKG.rglob("*.toml"))
        + sorted((REPO / "recipes").rglob("*.toml"))
        + sorted((REPO / "results").rglob("*.toml"))
        + sorted((REPO / "docs").glob("*.md"))
        + sorted((REPO / "recipes").rglob("NOTE.md"))
    )
    assert outside_citations([p for p in paths if p != Path(__file__)]) == []


def test_readme_step_table_names_every_package_and_module():
    table = step_table((REPO / "README.md").read_text())
    assert [e for e in top_level_entries() if f"`{e}" not in table] == []


def test_architecture_doc_has_a_paragraph_per_package():
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert [e for e in top_level_entries() if e.endswith("/") and f"`{e}" not in doc] == []


def test_architecture_doc_names_every_module_and_no_missing_one():
    doc = (REPO / "docs" / "architecture.md").read_text()
    names = {p.name for p in PKG.rglob("*.py")}
    wanted = {p.name for p in PKG.glob("*/*.py")} - {"__init__.py", "__main__.py"}
    assert sorted(n for n in wanted if f"`{n}`" not in doc) == []
    assert sorted(n for n in set(re.findall(r"`([\w]+\.py)`", doc)) if n not in names) == []


# ---- the checks fail on what they are meant to catch ----------------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    for rel, text in files.items():
        p = tmp_path / "labkit" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return load_modules(tmp_path / "labkit")


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    mods = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "measure/__init__.py": '"""m"""\nfrom labkit.measure.runner import run\n',
            "measure/runner.py": "def run():\n    from labkit.measure.summary import s\n",
            "measure/summary.py": "from labkit.measure.runner import run\ns = 1\n",
        },
    )
    assert cycles(edges(mods)) == [["labkit.measure.runner", "labkit.measure.summary"]]


def test_an_upward_import_and_a_private_import_are_found(tmp_path):
    mods = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "measure/__init__.py": '"""m"""\n',
            "measure/runner.py": "from labkit.cli import main\nfrom labkit.measure.client import _Parser\n",
            "measure/client.py": "class _Parser: ...\n",
            "cli/__init__.py": '"""c"""\ndef main(): ...\n',
            "serve/__init__.py": '"""s"""\nfrom labkit import tinymodel\n',
            "tinymodel/__init__.py": '"""t"""\n',
            "measure/request/__init__.py": '"""a subfolder is part of its package"""\n',
            "measure/request/client.py": "from labkit.cli import main\nfrom labkit.measure.runner import x\n",
        },
    )
    up = upward_imports({k: m for k, m in mods.items()})
    assert any("measure imports cli" in b for b in up) and any("tinymodel is for" in b for b in up)
    assert [b for b in up if "request/client.py" in b] == [
        f"{tmp_path / 'labkit/measure/request/client.py'}:1: measure imports cli (labkit.cli)"
        " - imports go recipe > nodes > stage/serve > measure > store > report > lab > cli"
    ]
    assert any("_Parser" in b for b in private_imports(mods))


def test_an_annotation_only_import_is_no_cycle_but_still_goes_one_way(tmp_path):
    mods = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "serve/__init__.py": '"""s"""\nfrom labkit.serve.lane import Lane\n',
            "serve/lane.py": "from labkit.serve.start import start\nclass Lane: ...\n",
            "serve/start.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from labkit.serve.lane import Lane\n"
                "    from labkit.lab import LaneRun\ndef start(lane: 'Lane') -> None: ...\n"
            ),
            "lab/__init__.py": '"""l"""\nclass LaneRun: ...\n',
        },
    )
    assert cycles(edges(mods)) == []
    assert any("serve imports lab" in b for b in upward_imports(mods))
    mods["labkit.serve.start"].type_imports.clear()
    mods["labkit.serve.start"].imports.append(("labkit.serve.lane", ["Lane"], 3))
    assert cycles(edges(mods)) == [["labkit.serve.lane", "labkit.serve.start"]]


def test_a_submodule_import_across_packages_and_an_environment_read_are_found(tmp_path):
    mods = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "recipe/__init__.py": '"""r"""\n',
            "recipe/load.py": "import os\nroot = os.environ.get('LABKIT_RECIPES')\n",
            "nodes/__init__.py": '"""n"""\n',
            "nodes/ssh.py": "from labkit.recipe.load import root\n",
        },
    )
    assert any("import from labkit.recipe instead" in b for b in cross_package_submodule_imports(mods))
    assert any("LABKIT_RECIPES" in b for b in environment_reads(mods))


def test_an_unsorted_a_shadowing_and_an_unused_export_are_found(tmp_path):
    mods = _tree(
        tmp_path,
        {
            "__init__.py": "",
            "serve/__init__.py": (
                '"""s"""\nfrom labkit.serve.checks import preflight, doctor, Lane\n'
                "__all__ = ['preflight', 'doctor', 'Lane']\n"
            ),
            "serve/checks.py": "def preflight(): ...\ndef doctor(): ...\nclass Lane: ...\n",
            "serve/preflight.py": "",
            "lab/__init__.py": '"""l"""\nfrom labkit.serve import Lane, preflight\n',
        },
    )
    assert [b.split(": ", 1)[1] for b in unsorted_exports(mods)] == [
        "__all__ is not sorted (constants, classes, functions; each A-Z)"
    ]
    assert [b.split(": ", 1)[1] for b in shadowing_exports(mods)] == [
        "exports 'preflight', which shadows the submodule labkit.serve.preflight"
    ]
    notebook = ast.parse("from labkit import serve\nserve.doctor()\n")
    assert unused_exports(mods, [notebook]) == []
    assert [b.split(": ", 1)[1] for b in unused_exports(mods, [])] == [
        "exports 'doctor', used by no other package or notebook"
    ]


def test_a_package_missing_from_the_step_table_is_found(tmp_path):
    (tmp_path / "labkit" / "newstep").mkdir(parents=True)
    (tmp_path / "labkit" / "newstep" / "__init__.py").write_text('"""x"""\n')
    table = step_table("| step | module |\n|---|---|\n| resolve | `labkit/recipe/` |\n\ntext")
    assert [e for e in top_level_entries(tmp_path / "labkit") if f"`{e}" not in table] == ["labkit/newstep/"]


def test_a_citation_outside_the_repo_or_of_a_missing_heading_is_found(tmp_path):
    cite = tmp_path / "m.py"
    cite.write_text('"""Formulas (measurement.md §2); windows (docs/measurement.md, "No such heading")."""\n')
    found = outside_citations([cite])
    assert len(found) == 2 and "measurement.md" in found[0] and "No such heading" in found[1]


def test_a_bad_citation_in_a_toml_comment_is_found(tmp_path):
    (tmp_path / "NOTE.md").write_text("# x\n\n## Caveats: what is unverified\n")
    toml = tmp_path / "recipe.toml"
    toml.write_text(
        '# Keys: labkit/records.py; notes: NOTE.md, "Caveats"; see OTHER.md and docs/architecture.md.\n'
        '[engine]\nrepo = "labkit/no-such-model"  # built by labkit/tinymodel/ (results/<recipe>/ too)\n'
        'args = {"--x" = "# labkit/not-a-comment.py"}\n'
    )
    assert outside_citations([toml]) == [
        f"{toml}:1: cites labkit/records.py, which does not exist",
        f"{toml}:1: cites a heading NOTE.md does not have: Caveats",
        f"{toml}:1: cites OTHER.md, which is not beside it",
    ]


def test_a_stale_module_list_is_found(tmp_path):
    root = tmp_path / "labkit"
    (root / "store" / "sub").mkdir(parents=True)
    (root / "store" / "__init__.py").write_text('"""s"""\n')
    (root / "store" / "sub" / "__init__.py").write_text('"""The part below. More."""\n')
    (root / "store" / "files.py").write_text('"""Paths, e.g. run.json; atomic writes. Why."""\n')
    (root / "store" / "sub" / "deep.py").write_text("x = 1\n")
    lists = module_lists(root)
    assert lists == {
        "modules:store": "- `files.py`: Paths, e.g. run.json; atomic writes.\n"
        "- `sub/`: The part below.\n  - `deep.py`: —"
    }
    doc = replaced(
        "a\n<!-- modules:store:start -->\n-\n<!-- modules:store:end -->\nb",
        "modules:store",
        lists["modules:store"],
    )
    assert stale_module_lists(doc, lists) == []
    (root / "store" / "runs.py").write_text('"""The run folder."""\n')
    assert stale_module_lists(doc, module_lists(root)) == ["modules:store"]
    assert stale_module_lists("no markers", lists) == ["modules:store"]


def test_store_and_report_load_without_the_http_client():
    """`labkit report` reads records through labkit.measure; the OpenAI SDK (0.3 s of imports here) stays unloaded."""
    import subprocess
    import sys

    code = "import sys, labkit.store, labkit.report; print(sorted({'openai', 'aiohttp'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
