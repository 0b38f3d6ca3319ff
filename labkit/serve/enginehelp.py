"""`labkit doctor`'s checks against the engine itself, inside the lane's image (or on the head node for a process
lane): every flag the lane sends must be one the engine's own `--help` lists (the closest one is named on a
typo), and `--probe NAME` says whether the engine's code contains a string such as an environment variable
(docs/engines.md, "Pre-boot checks and labkit doctor"). Pure: labkit.serve.checks runs the commands.
"""

from __future__ import annotations

import difflib
import posixpath
import re
import shlex

from labkit.nodes import Result
from labkit.recipe import LanePlan, engine_facts
from labkit.serve.runtimes import gpu_args
from labkit.serve.verdict import FAIL, OK, WARN, Check

# argparse help: an option line starts with a few spaces and a dash ("  --port PORT      Port number."); help
# text continues indented to the help column (24), so a description line that starts with "-" is not one.
HELP_OPTION = re.compile(r"^ {1,8}(-\S.*)$")
FLAG = re.compile(r"--?[A-Za-z0-9][\w.-]*")


def help_argv(engine, python: str) -> list[str]:
    """The serving program asked for every flag it takes (`vllm serve --help=all`)."""
    return [*engine.command(python), engine.help_flag]


def in_image(plan: LanePlan, argv: list[str], gpus: bool = False) -> str:
    """`argv` as a docker lane runs it: `docker run --rm` of the lane's image with its model and extra mounts and
    its recipe env, so an engine that lives in a mounted folder or needs its env answers as in the lane; the
    lane's `--gpus` for an engine's own CLI, which looks for its platform as it builds the parser. On the node
    itself for a process lane."""
    if plan.engine.runtime != "docker":
        return shlex.join(argv)
    image = plan.engine.image
    assert image is not None  # the recipe rules refuse a docker lane without engine.image
    out = ["docker", "run", "--rm", *(gpu_args(plan.engine.docker) if gpus else [])]
    for host_path, container_path in plan.mounts():
        out += ["-v", f"{host_path}:{container_path}"]
    out += [a for m in plan.engine.docker.mounts for a in ("-v", m.volume)]
    out += [a for key, value in plan.engine.env for a in ("-e", f"{key}={value}")]
    return shlex.join([*out, image, *argv])


def help_flags(text: str) -> set[str]:
    """Every option string an argparse help text lists ("--api-server-count API_SERVER_COUNT, -asc ..." gives
    both names; the metavar and the help after two spaces are skipped)."""
    flags = set()
    for line in text.splitlines():
        m = HELP_OPTION.match(line)
        if not m:
            continue
        invocation = re.split(r"\s{2,}", m.group(1).strip())[0]
        for part in invocation.split(", "):
            token = part.split(" ")[0].split("=")[0]
            if FLAG.fullmatch(token):
                flags.add(token)
    return flags


def lane_flags(plan: LanePlan, launches, prefix: tuple[str, ...]) -> list[tuple[str, str]]:
    """[(flag, origin)]: every engine.args key, then each flag labkit adds on some node (parallelism, served
    name, multi-node rendezvous, ...), read from the launches after the serving program `prefix`. A launch
    wrapped in a shell script (the Ray head) is read after its `exec`."""
    seen = dict.fromkeys((flag for flag, _ in plan.engine.args), "engine.args")
    values = {v for _, vals in plan.engine.args for v in vals}
    for ln in launches:
        argv = list(ln.argv)
        if argv[:2] == ["bash", "-c"]:
            words = shlex.split(argv[2])
            argv = words[words.index("exec") + 1 :] if "exec" in words else []
        if tuple(argv[: len(prefix)]) != prefix:
            continue
        for token in argv[len(prefix) :]:
            name = token.split("=")[0]
            if token not in values and FLAG.fullmatch(name) and not name[1:2].isdigit():
                seen.setdefault(name, "added by labkit")
    return list(seen.items())


def canonical(flag: str, kind: str) -> str:
    """The option string argparse looks up. An engine with flexible flags (vLLM) reads `--a_b` as `--a-b` and
    `--a.b` as a key of `--a`'s JSON (engine facts, flexible_flags)."""
    name = flag.split("=")[0]
    if engine_facts(kind).flexible_flags and name.startswith("--"):
        name = "--" + name[2:].partition(".")[0].replace("_", "-")
    return name


def help_problem(r: Result) -> str:
    """Why a help command's Result is no list of flags ("" when it is one): its last line of output, or exit code."""
    if r.ok and help_flags(r.stdout):
        return ""
    lines = (r.stderr.strip() or r.stdout.strip()).splitlines()
    return lines[-1][:300] if lines else f"exit {r.exit_code}"


def closest(name: str, known) -> str | None:
    """The known flag closest to `name` (difflib, cutoff 0.6), None when none is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else None


def flag_checks(node: str, kind: str, shown: str, flags: list[tuple[str, str]], r: Result) -> list[Check]:
    """One FAIL per flag the help does not list, with the closest listed one; one ok row when all are known."""
    known = help_flags(r.stdout)
    why = help_problem(r)
    if why:
        return [Check(node, "engine args", FAIL, f"{shown} listed no flags: {why}")]
    out = []
    for flag, origin in flags:
        name = canonical(flag, kind)
        if name in known:
            continue
        close = closest(name, known)
        text = f"{flag} ({origin}) is not listed by {shown}"
        text += f"; did you mean {close}?" if close else ""
        longer = [k for k in known if k.startswith(name)]
        if len(longer) == 1:
            text += f" (argparse would take it as an abbreviation of {longer[0]}; write it out)"
        facts = {"flag": flag, "origin": origin, "suggestion": close}
        out.append(Check(node, "engine args", FAIL, text, facts))
    if not out:
        text = f"all {len(flags)} flags of the lane are listed by {shown} ({len(known)} flags)"
        out.append(Check(node, "engine args", OK, text, {"flags": [f for f, _ in flags]}))
    return out


# ---------------------------------------------------------------------------------------------- probes

# Prints the package's folder without importing it (no CUDA or plugin initialisation): find_spec only.
FIND_PACKAGE = (
    "import importlib.util as u, os, sys; s = u.find_spec(sys.argv[1]); "
    "print(os.path.dirname(s.origin) if s and s.origin else (list(s.submodule_search_locations or [''])[0] "
    "if s else ''))"
)


def probe_script(python: str, package: str, names: list[str]) -> str:
    """A shell script: "@@dir <package folder>", then per name "@@probe NAME", the files containing it
    (`grep -rl`, __pycache__ skipped) and "@@rc <grep's exit code>"; "@@no-package" when it is not installed."""
    find = shlex.join([python, "-c", FIND_PACKAGE, package])
    parts = [f'd=$({find} 2>/dev/null); [ -n "$d" ] || {{ echo @@no-package; exit 3; }}; echo "@@dir $d"']
    for n in names:
        parts.append(
            f"echo {shlex.quote('@@probe ' + n)}; grep -rl --exclude-dir=__pycache__ -- {shlex.quote(n)} "
            '"$d"; echo "@@rc $?"'
        )
    return "; ".join(parts)


def probe_command(plan: LanePlan, python: str, package: str, names: list[str]) -> str:
    return in_image(plan, ["sh", "-c", probe_script(python, package, names)])


def parse_probe(stdout: str) -> tuple[str | None, dict[str, tuple[int, list[str]]]]:
    """(package folder or None, {name: (grep exit code, files)})."""
    folder: str | None = None
    current: str | None = None
    found: dict[str, tuple[int, list[str]]] = {}
    files: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("@@dir "):
            folder = line[len("@@dir ") :].strip()
        elif line.startswith("@@probe "):
            current, files = line[len("@@probe ") :], []
        elif line.startswith("@@rc ") and current is not None:
            found[current] = (int(line[len("@@rc ") :].strip() or 2), files)
            current = None
        elif current is not None and line.strip():
            files.append(line.strip())
    return folder, found


def probe_checks(node: str, package: str, names: list[str], r: Result) -> list[Check]:
    """Per name: found (in how many files, the first few named) or not found; FAIL when the package is missing."""
    folder, found = parse_probe(r.stdout)
    if folder is None:
        why = "not installed" if "@@no-package" in r.stdout else (r.stderr.strip() or f"exit {r.exit_code}")
        return [Check(node, "probe", FAIL, f"cannot search the {package} package: {why}")]
    out = []
    root = posixpath.dirname(folder.rstrip("/"))
    for name in names:
        rc, files = found.get(name, (2, []))
        shown = [posixpath.relpath(f, root) for f in files]
        facts = {"name": name, "package": folder, "files": shown, "grep_rc": rc}  # grep: 0 found, 1 not
        if rc == 0:
            listed = ", ".join(shown[:3]) + (", ..." if len(shown) > 3 else "")
            out.append(Check(node, "probe", OK, f"{name}: found in {len(files)} file(s) ({listed})", facts))
        elif rc == 1:
            out.append(Check(node, "probe", WARN, f"{name}: not found in {folder}", facts))
        else:
            out.append(Check(node, "probe", WARN, f"{name}: grep failed in {folder} (exit {rc})", facts))
    return out
