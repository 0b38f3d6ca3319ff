"""The state a node boots in, read with the pre-boot checks: its kernel, NVIDIA driver, CUDA and fabric NIC
firmware versions, and each compile/JIT cache the engine will find (files and bytes; absent or empty = cold)
(docs/engines.md, "Boot state").

Why: identical boots give different numbers when this differs. A first boot with an empty compile cache can
size a smaller KV pool than the next one; an OS update changed the kernel under a working RoCE lane. The check
never refuses a node: it records the facts (the boot facts keep them per node, `labkit compare` lists their
differences) and says which caches are cold. Pure: one shell command built per node, its output parsed.
"""

from __future__ import annotations

import re
import shlex

from labkit.nodes import Result
from labkit.recipe import LanePlan
from labkit.serve.runtimes import home_path
from labkit.serve.verdict import OK, WARN, Check
from labkit.units import format_size

STATE_CHECK = "boot state"
_DRIVER = re.compile(r"Driver Version:\s*([\w.-]+)")
_CUDA = re.compile(r"CUDA Version:\s*([\w.-]+)")
_FIRMWARE = re.compile(r"^firmware-version:\s*(.+?)\s*$", re.M)


def state_command(plan: LanePlan, node: str | None = None) -> str:
    """One shell script printing `# <section>` headers, each followed by its reading; a missing tool prints its
    error there and the script goes on."""
    parts = ["echo '# kernel'; uname -r", "echo '# nvidia-smi'; nvidia-smi 2>&1 | head -n 4"]
    fabric = plan.cluster.fabric
    if fabric is not None:
        parts.append(f"echo '# firmware'; ethtool -i {shlex.quote(fabric.interface_of(node))} 2>&1")
    for name, path in plan.compile_cache_folders:
        d = home_path(path)
        parts.append(
            f"echo {shlex.quote('# cache ' + name)}; if [ -d {d} ]; then find {d} -type f | wc -l; "
            f"du -sb {d} | cut -f1; else echo absent; fi"
        )
    return "; ".join(parts) + "; true"


def sections(text: str) -> dict[str, str]:
    """{section: its text} of state_command's output."""
    out: dict[str, str] = {}
    name = None
    for line in text.splitlines():
        if line.startswith("# "):
            name = line[2:].strip()
            out[name] = ""
        elif name is not None:
            out[name] += line + "\n"
    return out


def parse_state(text: str) -> dict:
    """{kernel, driver, cuda, firmware: str or None (not read), caches: {name: {files, bytes} or None (absent)},
    cold: [the engine's own cache, the first, when absent or empty]}. The kernel libraries' caches that follow
    are recorded but do not make a boot cold: a lane that never uses one (a CPU build) would always be."""
    parts = sections(text)
    kernel = parts.get("kernel", "").strip() or None
    smi = parts.get("nvidia-smi", "")
    firmware = _FIRMWARE.search(parts.get("firmware", ""))
    caches: dict[str, dict[str, int] | None] = {}
    for key, body in parts.items():
        if not key.startswith("cache "):
            continue
        lines = body.split()
        caches[key[6:]] = (
            {"files": int(lines[0]), "bytes": int(lines[1])}
            if len(lines) >= 2 and lines[0].isdigit() and lines[1].isdigit()
            else None
        )
    return {
        "kernel": kernel if kernel and " " not in kernel else None,
        "driver": m.group(1) if (m := _DRIVER.search(smi)) else None,
        "cuda": m.group(1) if (m := _CUDA.search(smi)) else None,
        "firmware": firmware.group(1) if firmware else None,
        "caches": caches,
        "cold": [name for name, c in list(caches.items())[:1] if not c or not c["files"]],
    }


def state_check(node: str, r: Result) -> Check:
    """The node's boot state as a check row: ok with the versions and caches, a warning when unreadable."""
    if not r.ok and not r.stdout.strip():
        return Check(node, STATE_CHECK, WARN, f"not read: {r.stderr.strip()[-200:] or f'exit {r.exit_code}'}")
    facts = parse_state(r.stdout)
    shown = [f"{k} {facts[k] or 'unknown'}" for k in ("kernel", "driver", "cuda", "firmware")]
    caches = facts["caches"]
    if caches:
        cold = facts["cold"]
        shown.append(
            "compile caches " + ("cold: " + ", ".join(cold) if cold else "warm") + f" ({_sizes(caches)})"
        )
    return Check(node, STATE_CHECK, OK, ", ".join(shown), facts)


def _sizes(caches: dict[str, dict[str, int] | None]) -> str:
    return ", ".join(
        f"{name} " + (f"{c['files']} files {format_size(c['bytes'])}" if c else "absent")
        for name, c in caches.items()
    )


COLD_CACHE = "cold-compile-cache"


def cold_cache_flags(state: dict[str, dict]) -> list[dict[str, str]]:
    """The run flag `cold-compile-cache` (window boot) for each node whose engine found a compile cache absent
    or empty: its first boot compiles, and may size another KV pool than the next (docs/engines.md, "Boot
    state")."""
    out = []
    for node, facts in state.items():
        cold = facts.get("cold") or []
        if cold:
            out.append(
                {
                    "code": COLD_CACHE,
                    "window": "boot",
                    "message": f"{node}: compile cache {', '.join(cold)} empty or absent before boot: this boot "
                    "compiled, and may have sized another KV pool than a warm one",
                }
            )
    return out
