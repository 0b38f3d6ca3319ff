"""Test helpers for staging: a real HF hub cache on disk, recipes with a local-view entry, a local host."""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from labkit.recipe import load_recipe

REPO = "acme/Tiny-Engram"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
COMMIT2 = "89abcdef0123456789abcdef0123456789abcdef"  # a later revision (new_revision)
LOCAL = ("model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors")


def payload(size: int, seed: int) -> bytes:
    """Deterministic, incompressible-looking bytes (different per seed)."""
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.blake2b(f"{seed}:{counter}".encode(), digest_size=64).digest()
        counter += 1
    return bytes(out[:size])


def default_files() -> dict[str, bytes]:
    return {
        "config.json": b'{"model_type": "tiny"}\n',
        "model.safetensors.index.json": b'{"weight_map": {}}\n',
        "model-00001-of-00003.safetensors": payload(300_000, 1),
        "model-00002-of-00003.safetensors": payload(2_100_000, 2),
        "model-00003-of-00003.safetensors": payload(1_500_000, 3),
        "original/params.json": b'{"dim": 8}\n',
    }


def make_cache(
    root: Path,
    files: dict[str, bytes] | None = None,
    repo: str = REPO,
    commit: str = COMMIT,
    ref: str | None = "main",
) -> Path:
    """An HF hub cache under root: blobs/<sha256>, snapshots/<commit>/<file> -> ../../blobs/<sha256>
    (relative, as huggingface_hub makes them), refs/<ref>. Returns the snapshot folder."""
    repo_dir = root / ("models--" + repo.replace("/", "--"))
    snap = repo_dir / "snapshots" / commit
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    for name, data in (files or default_files()).items():
        digest = hashlib.sha256(data).hexdigest()
        blob = repo_dir / "blobs" / digest
        blob.write_bytes(data)
        link = snap / name
        link.parent.mkdir(parents=True, exist_ok=True)
        depth = name.count("/")
        link.symlink_to(os.path.join(*([".."] * (2 + depth)), "blobs", digest))
    if ref:
        (repo_dir / "refs").mkdir(exist_ok=True)
        (repo_dir / "refs" / ref).write_text(commit)
    return snap


def new_revision(root: Path, changed: dict[str, bytes], commit: str = COMMIT2, ref: str = "main") -> Path:
    """A second commit in the same cache: the default files with `changed` replaced (their blobs are new, the
    others shared), and refs/<ref> moved to it, as `huggingface-cli download` of a new revision leaves it."""
    return make_cache(root, {**default_files(), **changed}, commit=commit, ref=ref)


def blob_name(data: bytes) -> str:
    """The name the hub cache gives the blob of `data` (its SHA-256)."""
    return hashlib.sha256(data).hexdigest()


def write_recipe(
    folder: Path,
    cache: Path,
    dst: str,
    nodes: list[str],
    local=LOCAL,
    min_free: str = "0",
    revision: str | None = None,
    ssh_port: int = 22,
    repo: str = REPO,
    verify: str | None = None,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rev = f'revision = "{revision}"\n' if revision else ""
    rev += f'verify = "{verify}"\n' if verify else ""
    local_list = ", ".join(f'"{n}"' for n in local)
    # [lane] and [measure] sub-tables are spelled out: recipe.py raises KeyError when they are absent
    # (nested defaults are not filled; reported to the lead).
    (folder / "recipe.toml").write_text(f"""
[lane]
label = "staging test"
defaults = {{}}

[measure]
decode = {{ concurrency = [1] }}
prefill = {{ prompt_tokens = [64] }}

[model]
repo = "{repo}"

[engine]
kind = "sim"

[cluster]
nodes = [{", ".join(f'"{n}"' for n in nodes)}]
shared_cache = "{cache}"
ssh_port = {ssh_port}

[[staging]]
kind = "local-view"
repo = "{repo}"
{rev}dst = "{dst}"
local = [{local_list}]
min_free = "{min_free}"
""")
    return folder


def plan_for(tmp: Path, cache: Path, dst: str, nodes: list[str], **kw):
    return load_recipe(write_recipe(tmp / "recipe", cache, dst, nodes, **kw)).resolve()


@dataclass
class Result:
    stdout: str
    stderr: str
    exit_code: int


class LocalNode:
    """A stand-in node on this machine (subprocess + /bin/sh), with stdout streamed line by line.
    Counts calls so tests can assert that nothing was run."""

    def __init__(self, name: str):
        self.name = name
        self.calls: list[str] = []

    def run(self, cmd, timeout=None, stdin=None) -> Result:
        return self.run_streaming(cmd, timeout=timeout, stdin=stdin, on_line=None)

    def run_streaming(self, cmd, timeout=None, stdin=None, on_line=None) -> Result:
        import shlex

        command = cmd if isinstance(cmd, str) else shlex.join(cmd)
        self.calls.append(command)
        env = {**os.environ, "LABKIT_TEST_NODE": self.name}
        proc = subprocess.Popen(
            ["/bin/sh", "-c", command],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        proc.stdin.write(stdin.encode() if isinstance(stdin, str) else (stdin or b""))
        proc.stdin.close()
        lines = []
        for raw in proc.stdout:
            line = raw.decode()
            lines.append(line)
            if on_line is not None:
                on_line(line.rstrip("\n"))
        err = proc.stderr.read().decode()
        proc.wait(timeout)
        return Result("".join(lines), err, proc.returncode)


def tree_state(root: Path) -> dict[str, tuple]:
    """Every path under root with (kind, size, mtime_ns, link target): to assert 'nothing changed'."""
    out: dict[str, tuple] = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (
                st.st_mode,
                st.st_size,
                st.st_mtime_ns,
                os.readlink(p) if p.is_symlink() else None,
            )
    return out
