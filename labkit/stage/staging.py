"""Staging a local view: hot shards copied to node-local disk, every other file symlinked into the shared cache.

Why: the lab note measured the Engram shards (model-00047/48) served off the NAS at 750 t/s prefill and
+258 MB NFS reads per short completion, vs 3,957 t/s and 0 MB with them on local disk. A `local-view`
staging entry declares which files to copy; `stage` makes every launch node hold one complete checkpoint
directory at `dst`:

    <dst>/model-00047-of-00048.safetensors   real copy (verified)
    <dst>/config.json -> <shared_cache>/models--org--name/snapshots/<commit>/config.json   (absolute link)
    <dst>/.labkit-view.json                  manifest: sizes, sampled-block hashes, source, commit, times

Links are absolute so they resolve inside the container, where the shared cache is mounted at the same
path (LanePlan.mounts()). Flow per run, every node in parallel:
  1. probe (read-only): resolve the revision, list the snapshot, free bytes of dst's filesystem, state
     and sampled blocks of the local files in the view and in the cache;
  2. preflight: need = bytes of local files not present and valid + min_free vs free (+ reclaimable
     partial/invalid files); views on one filesystem add their copies and count the largest min_free once;
     nodes resolving different commits, or any node short -> refused before anything changed anywhere;
  3. build (only where something is missing or wrong): remove stale/invalid entries, link, copy to a
     temp name, fsync, check, rename;
  4. verify: probe again, every file must check out; write the manifest atomically if it changed.
A second run is step 1 only (plus a comparison): verification, seconds.
Ctrl-C at any step ends the node-script processes on every node (NodeJobs: closing an SSH channel would
leave them running), waits for them (at most 30 s) and is then raised; a copy cut short is removed, or
removed by the next run, never left under its final name.

Serving: call `stage(plan, group)` and then `check_view(plan, group)` (no broken link, no partial copy)
before boot; the engine gets `plan.model_path` (the view's container mount) and `plan.mounts()` binds the
view and the shared cache at its own path. `NodeNfsProbe` samples each node's NFS server-read bytes
around a run.

Content checks: sizes always; sampled blocks (labkit/node/stage_node.py `sample_offsets`: 16 blocks of
64 KiB per file - first, last, evenly spaced - or the whole file when smaller) read on the node and hashed
here with xxh3_64; `full=True` also hashes whole files on the node (b2sum). A flip outside the sampled
blocks is only found by `full`.
"""

from __future__ import annotations

import base64
import json
import os
import posixpath
import re
import shlex
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import xxhash

from labkit import recipe as s
from labkit.errors import LabkitError, NodeError, RecipeError
from labkit.nodes import CommandTimeout, HostError, map_nodes
from labkit.stage import node_script as node_side
from labkit.units import format_size

NODE_SCRIPT = Path(node_side.__file__)
MANIFEST_NAME = node_side.MANIFEST_NAME
MANIFEST_FORMAT = 1
PARTIAL_PREFIX = node_side.PARTIAL_PREFIX


class StagingRefused(LabkitError):
    """Preflight found a node without enough free space; nothing was changed on any node."""

    def __init__(self, message: str, rows: list[dict]):
        self.rows = rows
        super().__init__(message)


# --------------------------------------------------------------------------------------------------
# Talking to the node script


class HostLike(Protocol):
    """What staging needs from a host (labkit.hosts.Host provides it)."""

    name: str

    def run(self, cmd: Any, timeout: float | None = None, stdin: str | bytes | None = None) -> Any: ...


EventSink = Callable[[dict], None]


MAX_ARG = 120_000  # Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN)
STOP_TIMEOUT = 20.0  # seconds for the command that ends a stage's node jobs on one node (SIGTERM, 5 s, SIGKILL)


class NodeJobs:
    """The node-script runs of one staging call, marked so that an interrupt can end them on their nodes.

    Closing an SSH channel (no pty) does not end the command it runs, so on Ctrl-C the controller ends them:
    every command line starts its script with the comment `# labkit-stage-job=<token>`, early in the command
    line of each process of the job (the node's login shell, `timeout`, `sh -c`, python), where `pkill -f`
    sees it. `stop(host)` sends those SIGTERM (a build removes its partial copy and exits), SIGKILL to any
    left after 5 s; from the first stop on, no further op starts (call_node refuses)."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self.stopped = threading.Event()

    @property
    def mark(self) -> str:
        return f"labkit-stage-job={self.token}"

    def stop_command(self) -> str:
        """procps only; the pattern `...=[x]yz` matches the mark but not this command's own command line."""
        pattern = shlex.quote(f"labkit-stage-job=[{self.token[0]}]{self.token[1:]}")
        return ('command -v pkill >/dev/null || { echo "pkill not found (procps)" >&2; exit 127; }; '
                f'p={pattern}; pkill -TERM -f "$p"; n=0; '
                'while pgrep -f "$p" >/dev/null && [ "$n" -lt 50 ]; do sleep 0.1; n=$((n + 1)); done; '
                'pkill -KILL -f "$p"; exit 0')

    def stop(self, host: HostLike) -> None:
        """End this staging call's node jobs on `host`, over a connection of its own (the job holds the host's)."""
        self.stopped.set()
        twin = getattr(host, "twin", None)
        side = twin() if twin is not None else host
        try:
            r = side.run(self.stop_command(), timeout=STOP_TIMEOUT)
        finally:
            if side is not host:
                side.close()
        if r.exit_code != 0:
            raise LabkitError(f"stopping the staging jobs failed (exit {r.exit_code}): "
                              f"{(r.stderr.strip() or r.stdout.strip())[-300:]}")


def node_command(op: str, request: dict, mark: str | None = None) -> str:
    """The shell line running the node script on one JSON request: `python3 -I -S -c SCRIPT OP JSON`, all quoted.

    The script travels as an argument, not on stdin: fabric/invoke feeds stdin one byte per ~10 ms, so a
    20 KB script on stdin took minutes over SSH. -I -S: the node's PYTHON* variables, user site and
    site-packages play no part (the script is stdlib only), and the interpreter starts ~3 ms sooner.
    `mark` (NodeJobs.mark) goes in a comment on the script's first line."""
    script = (f"# {mark}\n" if mark else "") + NODE_SCRIPT.read_text(encoding="utf-8")
    payload = json.dumps(request, separators=(",", ":"))
    if len(payload.encode()) > MAX_ARG:
        raise LabkitError(f"staging {op}: request of {len(payload)} bytes is too large for one command line "
                          f"(limit {MAX_ARG}); the snapshot has too many files for this version of staging")
    return shlex.join(["python3", "-I", "-S", "-c", script, op, payload])


def parse_node_output(node: str, op: str, stdout: str, stderr: str, exit_code: int,
                      on_event: EventSink | None = None) -> dict:
    """The result of one node-script run; progress lines go to on_event; failures raise LabkitError."""
    result = error = None
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        kind = ev.get("event")
        if kind == "result":
            result = ev.get("data")
        elif kind == "error":
            error = ev.get("message")
        elif on_event is not None:
            on_event(ev)
    if error is not None:
        raise LabkitError(f"{node}: staging {op}: {error}")
    if exit_code != 0 or result is None:
        detail = (stderr.strip() or stdout.strip())[-800:] or "no output"
        raise LabkitError(f"{node}: staging {op} failed (exit {exit_code}): {detail}")
    return result


@dataclass(frozen=True)
class Timeouts:
    """Seconds a node may take per node-script op; past it the op is ended there and the node is named as
    failed. Without them a node that drops off the network, or a read on a hung NFS mount, blocks staging
    (and serve) forever.

    `node`: probe (sampled blocks, ~0.5 MB per local file), write, check. Ops that read whole files (build's
    copy, full-mode hashing) get `build_floor + bytes / rate`. `rate` is set far below a healthy copy: four
    nodes sharing one NAS behind 1 GbE (~117 MB/s) would read ~30 MB/s each, and killing a slow but working
    copy of two 101.5 GB shards costs more than waiting longer on a hung one (the two shards: ~5.7 h)."""

    node: float = 120.0
    build_floor: float = 300.0
    rate: float = 10e6  # bytes/s

    def for_bytes(self, n: int, base: float | None = None) -> float:
        return (self.build_floor if base is None else base) + n / self.rate


def call_node(host: HostLike, op: str, request: dict, on_event: EventSink | None = None,
              timeout: float | None = None, jobs: NodeJobs | None = None) -> dict:
    """Run one op of the node script on `host`. Progress lines stream to on_event when the host can
    stream stdout (`run_streaming`), else they arrive when the op ends. A timeout raises LabkitError
    naming the node. With `jobs`, the run is one of them (an interrupt ends it); none starts once they
    were stopped."""
    if jobs is not None and jobs.stopped.is_set():
        raise LabkitError(f"{host.name}: staging {op} not started: staging was interrupted")
    cmd = node_command(op, request, jobs.mark if jobs is not None else None)
    streaming = getattr(host, "run_streaming", None)
    try:
        if on_event is not None and streaming is not None:
            def on_line(line: str) -> None:
                if line.startswith('{"') and '"event": "progress"' in line:
                    on_event(json.loads(line))

            r = streaming(cmd, timeout=timeout, on_line=on_line)
            return parse_node_output(host.name, op, r.stdout, r.stderr, r.exit_code, None)
        r = host.run(cmd, timeout=timeout)
    except CommandTimeout:
        raise LabkitError(f"{host.name}: staging {op} timed out after {timeout:g} s and was ended "
                          "(node unreachable, or a hung filesystem under the shared cache or the view?)")
    return parse_node_output(host.name, op, r.stdout, r.stderr, r.exit_code, on_event)


def each_node(hosts: Iterable[HostLike], fn: Callable[[HostLike], Any], what: str, jobs: NodeJobs | None = None,
              activity: str = "", say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """{node: fn(host)} run on all nodes at once; one NodeError naming every node that failed.

    With `jobs` (those fn runs), a Ctrl-C says it stops `activity` (via `say`, default stderr), ends the jobs
    on every node still running one, waits for them (bounded; labkit.hosts.map_nodes) and is then raised."""
    outcomes = map_nodes(fn, list(hosts), jobs.stop if jobs is not None else None, what=activity or what, say=say)
    failures = {}
    for name, (_, err) in outcomes.items():
        if err is not None:
            text = err.message if isinstance(err, HostError) else str(err)
            failures[name] = text.removeprefix(name + ": ")
    if failures:
        raise NodeError(what, failures)
    return {name: value for name, (value, _) in outcomes.items()}


# --------------------------------------------------------------------------------------------------
# Validating the plan (staging refuses a bad plan even if the recipe layer was bypassed)


_REPO_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def check_entry(plan, index: int, spec) -> None:
    """Raise RecipeError (plan file + key) for any path in a staging entry that could escape its folder."""
    key = f"staging[{index}]"
    try:
        if spec.kind != "local-view":
            raise s.Invalid(f"{key}.kind", f"staging only knows kind 'local-view', got {spec.kind!r}")
        for name in ("dst", "mount"):
            value = getattr(spec, name)
            if s.absolute_path(value, f"{key}.{name}") != value or value == "/":
                raise s.Invalid(f"{key}.{name}", f"expected a normalised absolute path below /, got {value!r}")
        if not spec.local:
            raise s.Invalid(f"{key}.local", "must not be empty")
        for i, name in enumerate(spec.local):
            s.file_name(name, f"{key}.local[{i}]")
            if name == MANIFEST_NAME or name.startswith(PARTIAL_PREFIX):
                raise s.Invalid(f"{key}.local[{i}]", f"{name!r} is a name labkit reserves in the view")
        if not _REPO_RE.fullmatch(spec.repo) or ".." in spec.repo:
            raise s.Invalid(f"{key}.repo", f"expected 'org/name', got {spec.repo!r}")
        if not spec.revision or "/" in spec.revision or spec.revision in (".", ".."):
            raise s.Invalid(f"{key}.revision", f"expected a branch, tag or commit name, got {spec.revision!r}")
        if spec.min_free < 0:
            raise s.Invalid(f"{key}.min_free", "must not be negative")
        cache = plan.cluster.shared_cache
        if not cache:
            raise s.Invalid("cluster.shared_cache", "required to stage a local view")
        s.absolute_path(cache, "cluster.shared_cache")
        if spec.dst == cache or spec.dst.startswith(cache.rstrip("/") + "/") or cache.startswith(spec.dst + "/"):
            raise s.Invalid(f"{key}.dst", f"{spec.dst} overlaps the shared cache {cache}")
    except s.Invalid as e:
        raise RecipeError(plan.file, e.key, e.message)


def repo_cache_path(shared_cache: str, repo: str) -> str:
    return f"{shared_cache.rstrip('/')}/models--{repo.replace('/', '--')}"


# --------------------------------------------------------------------------------------------------
# Pure assessment of one node's probe


@dataclass
class FileState:
    """One local file on one node: what the probe found and what happens to it."""

    name: str
    size: int
    status: str  # verified | adopted | copy | repair
    reason: str = ""
    hashes: list[str] = field(default_factory=list)  # xxh3_64 of the sampled blocks (source)
    full: str | None = None


@dataclass
class NodeAssessment:
    node: str
    commit: str
    snapshot: str
    files: dict[str, FileState]
    links: dict[str, str]  # name -> absolute target, every non-local snapshot entry
    to_copy: list[dict]
    to_link: list[dict]
    to_remove: list[str]
    copy_bytes: int  # local files to copy (missing or invalid)
    min_free: int  # to stay free on dst's filesystem after staging
    free: int
    reclaim: int
    fs_path: str
    fs_dev: int
    links_ok: int
    problems: list[str]  # mismatches found (each is repaired)
    warnings: list[str]
    manifest: dict | None
    sources_full: dict[str, str]

    @property
    def need(self) -> int:
        return self.copy_bytes + self.min_free

    @property
    def margin(self) -> int:
        return self.free + self.reclaim - self.need

    @property
    def changes(self) -> bool:
        return bool(self.to_copy or self.to_link or self.to_remove)


def sample_hashes(raw_b64: str, size: int, block: int, count: int) -> list[str]:
    """xxh3_64 hex digest of each sampled block (the blocks come concatenated from the node)."""
    raw = base64.b64decode(raw_b64)
    offsets = node_side.sample_offsets(size, block, count)
    lengths = node_side.block_lengths(size, offsets, block)
    if sum(lengths) != len(raw):
        raise LabkitError(f"sampled bytes: got {len(raw)}, expected {sum(lengths)} for a {size}-byte file")
    out, pos = [], 0
    for n in lengths:
        out.append(xxhash.xxh3_64_hexdigest(raw[pos:pos + n]))
        pos += n
    return out


@dataclass(frozen=True)
class Source:
    """One local file as found in the shared cache: size, xxh3_64 of each sampled block, digest of the raw
    samples (to compare what each node read), whole-file hash in full mode."""

    size: int
    hashes: tuple[str, ...]
    digest: str
    full: str | None


def sources_from(probes: list[dict], spec, block: int, count: int) -> dict[str, Source]:
    """The source facts of each local file, from whichever probe carried its raw sampled blocks."""
    out = {}
    for name in spec.local:
        for probe in probes:
            src = probe["sources"].get(name)
            if src is not None and "samples" in src:
                out[name] = Source(src["size"], tuple(sample_hashes(src["samples"], src["size"], block, count)),
                                   src["digest"], src.get("full"))
                break
        else:
            if all(name in p["sources"] for p in probes):
                raise LabkitError(f"{probes[0]['node']}: no probe returned the sampled blocks of {name}")
    return out


def assess(probe: dict, spec, block: int, count: int, full: bool,
           sources: dict[str, Source] | None = None) -> NodeAssessment:
    """Decide what one node needs, from its probe (pure; raises LabkitError naming node and path).

    `sources`: the source facts (from the probe that sent raw blocks; default: this probe)."""
    node, snapshot = probe["node"], probe["snapshot"]
    entries = probe["entries"]
    for e in entries.values():
        if e["kind"] == "broken":
            raise LabkitError(f"{node}: the shared cache has a dangling entry: {e['error']}")
    for name in spec.local:
        if name not in entries:
            raise LabkitError(f"{node}: {name} (in staging.local) is not in the snapshot {snapshot}")
        if entries[name]["kind"] != "file":
            raise LabkitError(f"{node}: {name} (in staging.local) is a directory in {snapshot}; only files are copied")
    if probe["dst_state"] not in ("missing", "dir"):
        raise LabkitError(f"{node}: {spec.dst} exists and is not a directory ({probe['dst_state']})")

    if sources is None:
        sources = sources_from([probe], spec, block, count)
    view, manifest = probe["view"], probe["manifest"]
    old = (manifest or {}).get("files", {}) if (manifest or {}).get("commit") == probe["commit"] else {}
    files: dict[str, FileState] = {}
    to_copy, to_link, to_remove, problems, warnings = [], [], [], [], []
    reclaim = 0
    sources_full = {}
    for name in spec.local:
        src, ref = probe["sources"][name], sources[name]
        if src["size"] != ref.size or src["digest"] != ref.digest or (full and src.get("full") != ref.full):
            raise LabkitError(f"{node}: {snapshot}/{name} reads differently here than on the other nodes "
                              "(size or sampled blocks); is the shared cache consistent?")
        size, hashes = ref.size, list(ref.hashes)
        if src.get("full"):
            sources_full[name] = src["full"]
        have = view.get(name, {"state": "missing"})
        reason = ""
        if have["state"] == "missing":
            status = "copy"
        elif have["state"] == "dir":
            raise LabkitError(f"{node}: {spec.dst}/{name} is a directory where the view needs a copy; "
                              "remove it by hand")
        elif have["state"] != "file":
            status, reason = "repair", f"is a {have['state']}, not a copy"
        elif have["size"] != size:
            status, reason = "repair", f"has {have['size']} bytes, the source {size} (truncated or different file)"
        else:
            bad = [off for off, same in zip(node_side.sample_offsets(size, block, count), have["match"], strict=True)
                   if not same]
            if bad:
                status, reason = "repair", (f"sampled block(s) at offset {', '.join(map(str, bad[:4]))}"
                                            f"{' ...' if len(bad) > 4 else ''} differ from the source")
            elif full and have.get("full") != src.get("full"):
                status, reason = "repair", "full hash differs from the source"
            else:
                prev = old.get(name, {})
                same = (prev.get("size") == size and prev.get("xxh3_64") == hashes
                        and prev.get("block") == block and prev.get("count") == count)
                status = "verified" if same else "adopted"
        if status in ("copy", "repair"):
            to_copy.append({"name": name, "src": f"{snapshot}/{name}", "size": size})
        if status == "repair":
            problems.append(f"{node}: {spec.dst}/{name} {reason}: re-copying (never used as is)")
            to_remove.append(name)
            reclaim += have.get("alloc", 0)
        files[name] = FileState(name, size, status, reason, hashes, src.get("full"))

    links, links_ok = {}, 0
    for name in entries:
        if name in files:
            continue
        target = f"{snapshot}/{name}"
        links[name] = target
        have = view.get(name, {"state": "missing"})
        if have["state"] == "link" and have["target"] == target:
            links_ok += 1
            continue
        if have["state"] == "dir":
            raise LabkitError(f"{node}: {spec.dst}/{name} is a directory where the view needs a link; "
                              "remove it by hand")
        if have["state"] == "file":
            reclaim += have.get("alloc", 0)
        to_link.append({"name": name, "target": target})
    for p in probe["partials"]:
        to_remove.append(p["name"])
        reclaim += p["alloc"]
        warnings.append(f"{node}: removing {spec.dst}/{p['name']} left by an interrupted stage")
    owned = view_owned_names(manifest)
    repo_dir = posixpath.dirname(posixpath.dirname(snapshot))  # <shared_cache>/models--org--name
    for name, have in probe["extra"].items():
        if have["state"] == "link" and (name in owned or _points_into(have["target"], repo_dir)):
            to_remove.append(name)
            warnings.append(f"{node}: removing stale link {spec.dst}/{name} (not in snapshot {probe['commit']})")
        elif have["state"] == "link":
            why = "the view's manifest does not list it" if owned else f"{spec.dst} has no labkit manifest"
            warnings.append(f"{node}: {spec.dst}/{name} -> {have['target']} is not part of snapshot "
                            f"{probe['commit']} and not labkit's ({why}); left in place")
        else:
            warnings.append(f"{node}: {spec.dst}/{name} is not part of snapshot {probe['commit']}; left in place")
    return NodeAssessment(node, probe["commit"], snapshot, files, links, to_copy, to_link, to_remove,
                          sum(c["size"] for c in to_copy), spec.min_free, probe["free"], reclaim, probe["fs_path"], probe["fs_dev"], links_ok, problems, warnings,
                          manifest, sources_full)


def view_owned_names(manifest: Any) -> set[str]:
    """Names a labkit manifest records as made by staging (its links and copies); empty for a folder without
    a valid manifest, whose entries are someone else's (e.g. a mistyped dst holding the user's model links)."""
    if not isinstance(manifest, dict) or manifest.get("kind") != "local-view":
        return set()
    links, files = manifest.get("links"), manifest.get("files")
    return set(links if isinstance(links, dict) else ()) | set(files if isinstance(files, dict) else ())


def _points_into(target: str, folder: str) -> bool:
    """True for an absolute link target inside `folder` (after normalising any '..')."""
    return target.startswith("/") and posixpath.normpath(target).startswith(folder.rstrip("/") + "/")


def preflight_rows(assessments: list[NodeAssessment]) -> list[dict]:
    """One row per node (need, free, reclaimable, margin), the binding node (least margin) marked."""
    rows = [{"node": a.node, "filesystem": a.fs_path, "need": a.need, "free": a.free, "reclaim": a.reclaim,
             "margin": a.margin, "binding": False} for a in assessments]
    if rows:
        min(rows, key=lambda r: r["margin"])["binding"] = True
    return rows


def preflight_table(rows: list[dict]) -> str:
    from tabulate import tabulate

    table = [[r["node"], r["filesystem"], format_size(r["need"]), format_size(r["free"]), format_size(r["reclaim"]),
              format_size(r["margin"]), ("SHORT " if r["margin"] < 0 else "") + ("binding" if r["binding"] else "")]
             for r in rows]
    return tabulate(table, headers=["node", "filesystem", "need", "free", "reclaimable", "margin", ""])


def check_space(assessments: list[NodeAssessment], dst: str) -> list[dict]:
    """Raise StagingRefused (with the per-node table) when any node's margin is negative."""
    rows = preflight_rows(assessments)
    short = [r for r in rows if r["margin"] < 0]
    if short:
        binding = next(r for r in rows if r["binding"])
        names = ", ".join(r["node"] for r in short)
        raise StagingRefused(
            f"staging {dst} refused before changing anything on any node: not enough free space on {names} "
            f"(binding node {binding['node']}, short by {format_size(-binding['margin'])}); "
            "need = local files to copy + min_free (per filesystem: all its views' copies + their largest min_free)\n" + preflight_table(rows), rows)
    return rows


# --------------------------------------------------------------------------------------------------
# Reports


@dataclass
class NodeReport:
    node: str
    commit: str
    copied: int = 0
    adopted: int = 0
    verified: int = 0
    linked: int = 0  # links created or replaced this run
    removed: int = 0  # leftovers deleted this run (partial copies, stale links); a re-copied file counts as copied
    links_ok: int = 0  # links already correct
    bytes_copied: int = 0
    copy_seconds: float = 0.0
    seconds: float = 0.0  # whole stage on this node (probe, build, verify)
    repaired: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)

    @property
    def mb_per_s(self) -> float | None:
        return self.bytes_copied / self.copy_seconds / 1e6 if self.copy_seconds > 0 else None


@dataclass
class ViewReport:
    dst: str
    repo: str
    revision: str
    commit: str
    full: bool
    preflight: list[dict]
    nodes: dict[str, NodeReport]
    manifest_written: dict[str, bool]

    @property
    def verification_only(self) -> bool:
        return all(n.copied == 0 and n.linked == 0 and n.removed == 0 for n in self.nodes.values()) and not any(
            self.manifest_written.values())


@dataclass
class StageReport:
    """What `stage` did, per view and node; `table()` for people, `to_dict()` for run records."""

    views: list[ViewReport]
    seconds: float

    @property
    def verification_only(self) -> bool:
        return all(v.verification_only for v in self.views)

    def to_dict(self) -> dict:
        out = {"seconds": self.seconds, "verification_only": self.verification_only, "views": []}
        for v in self.views:
            d = asdict(v)
            for name, n in v.nodes.items():
                d["nodes"][name]["mb_per_s"] = n.mb_per_s
            out["views"].append(d)
        return out

    def table(self) -> str:
        from tabulate import tabulate

        parts = []
        for v in self.views:
            rows = [[n.node, n.copied, n.adopted, n.verified, n.linked + n.links_ok, n.removed,
                     format_size(n.bytes_copied), f"{n.seconds:.1f}", f"{n.mb_per_s:.0f}" if n.mb_per_s else "-"]
                    for n in v.nodes.values()]
            parts.append(f"view {v.dst} ({v.repo}@{v.revision} = {v.commit[:12]}"
                         f"{', full hashes' if v.full else ''})")
            parts.append(tabulate(rows, headers=["node", "copied", "adopted", "verified", "links", "removed",
                                                 "bytes copied", "seconds", "copy MB/s"]))
            notes = [m for n in v.nodes.values() for m in n.repaired + n.warnings]
            parts += [f"  note: {m}" for m in notes]
        parts.append("verification only: nothing copied or changed" if self.verification_only else
                     f"staged in {self.seconds:.1f} s")
        return "\n".join(parts)


# --------------------------------------------------------------------------------------------------
# Progress


class CopyProgress:
    """Aggregate copy progress over nodes: one tqdm bar on stderr (throttled), thread-safe."""

    def __init__(self, total: int, enabled: bool = True):
        self.total = total
        self._done: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._bar = None
        if enabled and total > 0:
            from tqdm import tqdm

            batch = os.environ.get("LABKIT_BATCH") == "1"
            self._bar = tqdm(total=total, unit="B", unit_scale=True, desc="staging copy", file=sys.stderr,
                             mininterval=30.0 if batch else 0.5, leave=True)

    def sink(self, node: str) -> EventSink:
        def on_event(ev: dict) -> None:
            if ev.get("event") != "progress":
                return
            with self._lock:
                key = (node, str(ev.get("name")))
                delta = int(ev.get("done", 0)) - self._done.get(key, 0)
                self._done[key] = int(ev.get("done", 0))
                if self._bar is not None and delta:
                    self._bar.update(delta)

        return on_event

    @property
    def done(self) -> int:
        return sum(self._done.values())

    def write(self, text: str) -> None:
        """A line of its own on stderr, above the bar (which is drawn again below it)."""
        if self._bar is not None:
            from tqdm import tqdm

            tqdm.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


# --------------------------------------------------------------------------------------------------
# The stage


def probe_node(h: HostLike, plan, spec, block: int, count: int, full: bool,
               send_source: Iterable[str] | None = None, timeout: float | None = None,
               jobs: NodeJobs | None = None) -> dict:
    """The node's read-only view of the cache and `spec.dst`, labelled with the host's name.

    `send_source`: local files whose raw sampled source blocks this node returns (default: all)."""
    request = {"repo_cache": repo_cache_path(plan.cluster.shared_cache, spec.repo), "revision": spec.revision,
               "dst": spec.dst, "local": list(spec.local), "block": block, "count": count, "full": full,
               "send_source": list(spec.local if send_source is None else send_source)}
    out = call_node(h, "probe", request, timeout=timeout, jobs=jobs)
    out["hostname"], out["node"] = out.get("node"), h.name
    return out


def _full_bytes(probe: dict, spec) -> int:
    """Bytes a full-mode probe hashes whole: each local file in the cache and its copy in the view."""
    src = sum(e.get("size", 0) for n, e in probe["entries"].items() if n in spec.local)
    return src + sum(v.get("size", 0) for n, v in probe["view"].items() if n in spec.local)


def build_manifest(spec, shared_cache: str, a: NodeAssessment, copied: dict[str, dict], block: int, count: int,
                   now: str) -> dict:
    """The manifest for one node's view (pure); unchanged entries keep their original state and time."""
    old_files = (a.manifest or {}).get("files", {}) if (a.manifest or {}).get("commit") == a.commit else {}
    files = {}
    for name, f in a.files.items():
        entry = {"size": f.size, "block": block, "count": count,
                 "offsets": node_side.sample_offsets(f.size, block, count), "xxh3_64": f.hashes,
                 "source": f"{a.snapshot}/{name}"}
        if name in copied:
            entry.update(state="copied", at=now)
            full = copied[name].get("full")
        elif f.status == "verified":
            entry.update(state=old_files[name].get("state", "adopted"), at=old_files[name].get("at", now))
            full = f.full or old_files[name].get("full")
        else:
            entry.update(state="adopted", at=now)
            full = f.full
        if full:
            entry["full"] = full
        files[name] = entry
    return {
        "format": MANIFEST_FORMAT, "kind": "local-view", "repo": spec.repo, "revision": spec.revision,
        "commit": a.commit, "snapshot": a.snapshot, "shared_cache": shared_cache, "dst": spec.dst,
        "sampling": {"block": block, "count": count, "hash": "xxh3_64",
                     "rule": "first, last and evenly spaced blocks (whole file if size <= block*count); "
                             "see labkit/node/stage_node.py sample_offsets"},
        "files": files, "links": dict(sorted(a.links.items())),
    }


def _same_manifest(old: dict | None, new: dict) -> bool:
    return old is not None and {k: v for k, v in old.items() if k != "updated"} == new


def stage(plan, hosts: Iterable[HostLike], *, full: bool = False, progress: bool = True,
          block: int = node_side.SAMPLE_BLOCK, count: int = node_side.SAMPLE_COUNT,
          timeouts: Timeouts = Timeouts(), copy_rate: float | None = None) -> StageReport:
    """Build and verify every local-view staging entry of `plan` on every host; see the module doc.

    `copy_rate`: cap each node's copy at this many bytes/s (tests: a copy slow enough to interrupt).

    Raises StagingRefused (nothing changed) when a node lacks space, NodeError naming nodes whose probe,
    build or verification failed or timed out, RecipeError for a plan whose staging paths are unsafe.
    A Ctrl-C ends the node jobs on every node (a copy in flight is discarded, never left under its final
    name; the next stage redoes it) and is raised once they ended (NodeJobs, each_node).
    """
    t0 = time.monotonic()
    jobs = NodeJobs()
    hosts = list(hosts)
    specs = [spec for spec in plan.staging if spec.kind == "local-view"]
    for i, spec in enumerate(plan.staging):
        check_entry(plan, i, spec)
    if not specs or not hosts:
        return StageReport([], 0.0)

    # 1+2: probe everything, refuse before any change.
    assessed, sources = _probe_and_assess(plan, specs, hosts, block, count, full, timeouts, jobs)
    preflights = [_check_space_grouped(assessed, specs, i) for i in range(len(specs))]

    reports = []
    for i, spec in enumerate(specs):
        reports.append(_stage_view(plan, spec, hosts, assessed[i], preflights[i], sources[i], full, progress, block,
                                   count, timeouts, copy_rate, jobs))
    return StageReport(reports, time.monotonic() - t0)


def _probe_and_assess(plan, specs, hosts: list[HostLike], block: int, count: int, full: bool,
                      timeouts: Timeouts, jobs: NodeJobs) -> tuple[list[list[NodeAssessment]], list[dict[str, Source]]]:
    """Probe every node (in parallel, read-only) and assess each.

    The raw source blocks of local file j come from node j mod N only (spreading the transfer: fabric moves
    stdout slowly), every node compares its own copy with the source it reads itself. Full mode probes
    twice: sampled first (short timeout, gives the sizes), then with whole-file hashes, timed for their bytes."""
    names = [h.name for h in hosts]

    def probe_one(h: HostLike, spec) -> dict:
        k = names.index(h.name)
        send = [f for j, f in enumerate(spec.local) if j % len(names) == k]
        # in full mode the first probe is only for the sizes: its raw samples would travel twice
        probe = probe_node(h, plan, spec, block, count, False, send_source=() if full else send,
                           timeout=timeouts.node, jobs=jobs)
        if not full:
            return probe
        return probe_node(h, plan, spec, block, count, True, send_source=send,
                          timeout=timeouts.for_bytes(_full_bytes(probe, spec), base=timeouts.node), jobs=jobs)

    def probe_all(h: HostLike) -> list[dict]:
        return [probe_one(h, spec) for spec in specs]

    what = "staging preflight (nothing was changed)"
    probes = each_node(hosts, probe_all, what, jobs, "the staging preflight")
    for i, spec in enumerate(specs):
        commits = {n: probes[n][i]["commit"] for n in names}
        if len(set(commits.values())) > 1:
            raise NodeError(f"{what}: the nodes resolve {spec.repo}@{spec.revision} to different commits "
                            "(is the shared cache the same on every node?)",
                            {n: f"{spec.repo}@{spec.revision} is commit {c} here" for n, c in commits.items()})
    try:
        sources = [sources_from([probes[n][i] for n in names], spec, block, count) for i, spec in enumerate(specs)]
    except LabkitError as e:
        raise NodeError(what, {names[0]: str(e).removeprefix(names[0] + ": ")})
    assessed: list[list[NodeAssessment]] = []
    errors: dict[str, str] = {}
    for i, spec in enumerate(specs):
        row = []
        for h in hosts:
            try:
                row.append(assess(probes[h.name][i], spec, block, count, full, sources[i]))
            except LabkitError as e:
                errors.setdefault(h.name, str(e).removeprefix(h.name + ": "))
        assessed.append(row)
    if errors:
        raise NodeError(what, errors)
    return assessed, sources


def _check_space_grouped(assessed: list[list[NodeAssessment]], specs, index: int) -> list[dict]:
    """Space check for view `index`; views on the same filesystem of a node share its free bytes: their copies
    add up, and min_free (what must stay free on that filesystem) counts once, the largest of them."""
    combined = []
    for a in assessed[index]:
        same_fs = [b for row in assessed for b in row if b.node == a.node and b.fs_dev == a.fs_dev]
        combined.append(replace(a, copy_bytes=sum(b.copy_bytes for b in same_fs),
                                min_free=max(b.min_free for b in same_fs),
                                reclaim=sum(b.reclaim for b in same_fs)))
    return check_space(combined, specs[index].dst)


def _stage_view(plan, spec, hosts: list[HostLike], assessed: list[NodeAssessment], preflight: list[dict],
                sources: dict[str, Source], full: bool, progress: bool, block: int, count: int,
                timeouts: Timeouts, copy_rate: float | None, jobs: NodeJobs) -> ViewReport:
    by_node = {a.node: a for a in assessed}
    node_of = {h.name: by_node[a.node] for h, a in zip(hosts, assessed, strict=True)}
    total = sum(c["size"] for a in assessed for c in a.to_copy)
    bar = CopyProgress(total, enabled=progress)
    shared_cache = plan.cluster.shared_cache
    now = datetime.now(UTC).isoformat(timespec="seconds")

    def one(h: HostLike) -> tuple[NodeReport, bool]:
        t0 = time.monotonic()
        a = node_of[h.name]
        rep = NodeReport(h.name, a.commit, repaired=list(a.problems), warnings=list(a.warnings))
        copied: dict[str, dict] = {}
        if a.changes:
            # Full mode hashes each copy and its source whole after copying: the bytes are read 3 times.
            work = sum(c["size"] for c in a.to_copy) * (3 if full else 1)
            request = {"dst": spec.dst, "remove": a.to_remove, "copy": a.to_copy, "link": a.to_link,
                       "block": block, "count": count, "full": full}
            if copy_rate:
                request["rate"] = copy_rate
            built = call_node(h, "build", request, on_event=bar.sink(h.name), timeout=timeouts.for_bytes(work),
                              jobs=jobs)
            if built["errors"]:
                raise LabkitError("; ".join(built["errors"]))
            copied = {c["name"]: c for c in built["copied"]}
            rep.linked = built["linked"]
            rep.removed = sum(1 for name in built["removed"] if name not in copied)
            rep.bytes_copied = sum(c["bytes"] for c in built["copied"])
            rep.copy_seconds = sum(c["seconds"] for c in built["copied"])
            rep.methods = sorted({c["method"] for c in built["copied"]})
            # Verify what is now on disk, exactly as a later run would.
            again = assess(probe_node(h, plan, spec, block, count, False, send_source=(), timeout=timeouts.node,
                                      jobs=jobs), spec, block, count, False, sources)
            if again.changes or again.commit != a.commit:
                raise LabkitError(f"view {spec.dst} still incomplete after building: copy "
                                  f"{[c['name'] for c in again.to_copy]}, link {[x['name'] for x in again.to_link]}, "
                                  f"remove {again.to_remove}")
            for name, f in again.files.items():
                f.full = a.files[name].full
            a = replace(again, manifest=a.manifest)
        rep.links_ok = len(a.links) - rep.linked
        for name, f in a.files.items():
            if name in copied:
                rep.copied += 1
            elif f.status == "verified":
                rep.verified += 1
            else:
                rep.adopted += 1
        manifest = build_manifest(spec, shared_cache, a, copied, block, count, now)
        written = False
        if not _same_manifest(a.manifest, manifest):
            text = json.dumps({**manifest, "updated": now}, indent=1) + "\n"
            call_node(h, "write", {"dst": spec.dst, "name": MANIFEST_NAME, "text": text}, timeout=timeouts.node,
                      jobs=jobs)
            written = True
        rep.seconds = time.monotonic() - t0
        return rep, written

    try:
        activity = f"the copy into {spec.dst}" if total else f"the staging of {spec.dst}"
        done = each_node(hosts, one, f"staging {spec.dst}", jobs, activity, say=bar.write)
    finally:
        bar.close()
    # One commit on every node: the preflight refused otherwise, and each node's verification kept it.
    return ViewReport(spec.dst, spec.repo, spec.revision, assessed[0].commit, full, preflight,
                      {n: r for n, (r, _) in done.items()}, {n: w for n, (_, w) in done.items()})


def preflight(plan, hosts: Iterable[HostLike], *, full: bool = False,
              timeouts: Timeouts = Timeouts()) -> list[list[dict]]:
    """Only steps 1-2: per view, the per-node space rows; raises StagingRefused like `stage`. Read-only."""
    hosts = list(hosts)
    specs = [spec for spec in plan.staging if spec.kind == "local-view"]
    for i, spec in enumerate(plan.staging):
        check_entry(plan, i, spec)
    block, count = node_side.SAMPLE_BLOCK, node_side.SAMPLE_COUNT

    if not specs or not hosts:
        return []
    assessed, _ = _probe_and_assess(plan, specs, hosts, block, count, full, timeouts, NodeJobs())
    return [_check_space_grouped(assessed, specs, i) for i in range(len(specs))]


def check_view(plan, hosts: Iterable[HostLike], timeouts: Timeouts = Timeouts()) -> dict[str, int]:
    """Before launch: every link in every view resolves and no partial copy is left; {node: links}.

    Raises NodeError naming each node with broken links (and their targets)."""
    specs = [spec for spec in plan.staging if spec.kind == "local-view"]
    for i, spec in enumerate(plan.staging):
        check_entry(plan, i, spec)
    jobs = NodeJobs()

    def one(h: HostLike) -> int:
        total = 0
        for spec in specs:
            r = call_node(h, "check", {"dst": spec.dst}, timeout=timeouts.node, jobs=jobs)
            problems = [f"{spec.dst}/{b['name']} -> {b['target']} is broken" for b in r["broken"]]
            problems += [f"{spec.dst}/{p} is an unfinished copy" for p in r["partials"]]
            if problems:
                raise LabkitError("; ".join(problems[:10]) + (f" (+{len(problems) - 10} more)"
                                                              if len(problems) > 10 else ""))
            total += r["links"]
        return total

    return each_node(hosts, one, "view check before launch", jobs, "the view check")
