"""What every engine adapter provides: per-node launch commands, a readiness probe, boot-log parsing.

Adapters are pure: they turn a LanePlan and the node list into data (argv, env, probe paths) and
turn log text into facts. Running anything is the runtime's and the lane's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from labkit.errors import LabkitError
from labkit.recipe import EngineFacts, LanePlan, engine_facts
from labkit.serve.fabric import fabric_env
from labkit.serve.transport import TransportReader

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class NodeSpec:
    """A node as the engine sees it: its name (for containers, logs), the address peers use (its fabric address
    when the lane declares a fabric) and the address clients and SSH use (its management address)."""

    name: str
    address: str
    client: str = ""  # management address; "" = the same as `address`

    @property
    def client_address(self) -> str:
        return self.client or self.address


@dataclass(frozen=True)
class NodeLaunch:
    """One node's engine process: argv and the env it needs (recipe env plus per-node values)."""

    node: str
    rank: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    serves_http: bool  # only the head answers the API; workers are checked by liveness


@dataclass(frozen=True)
class Probe:
    """A readiness check: GET path on the head until it returns `status`."""

    path: str
    status: int = 200


@dataclass(frozen=True)
class BootPattern:
    """A boot-log line worth recording: `name` keys BootFacts.lines, `label` is shown as progress."""

    name: str
    regex: re.Pattern
    label: str


@dataclass
class BootPhase:
    at: float  # seconds since the lane's start command was issued
    node: str
    name: str
    line: str


@dataclass
class BootFacts:
    """What a boot revealed, with the raw lines the numbers were read from (the record's provenance)."""

    engine_version: str | None = None
    boot_seconds: float | None = None  # start command issued -> readiness noticed (wall clock, this host)
    load_seconds: float | None = (
        None  # engine's own model-load figure (vLLM "Model loading took", SGLang weights)
    )
    weights_seconds: float | None = None  # vLLM "Loading weights took"
    weights_gib: float | None = None
    engine_init_seconds: float | None = None
    compile_seconds: float | None = None
    graph_capture_seconds: float | None = None
    kv_pool_tokens: int | None = None
    kv_pool_context: int | None = None  # the per-request length the concurrency figure refers to
    max_concurrency: float | None = None
    model_init_seconds: float | None = (
        None  # vLLM "Initializing model took" (building the model, before weights)
    )
    spec_tokens: int | None = None  # K, as the engine reports its speculative config (vLLM engine-core line)
    fabric: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> interface, address, source
    images: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> image, id, repo_digests, pulled
    memory: dict[str, dict[str, int]] = field(default_factory=dict)  # node -> /proc/meminfo bytes before boot
    # node -> kernel, driver, CUDA, firmware and compile caches before boot (labkit.serve.bootstate)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    # node -> the device probe's memory read and matmul figures, before boot (labkit.serve.devprobe)
    probe: dict[str, dict[str, Any]] = field(default_factory=dict)
    # node -> MemAvailable/Cached before the start and after ready (labkit.serve.readyfacts.memory_facts)
    memory_at_boot: dict[str, dict[str, Any]] = field(default_factory=dict)
    kv_pool: dict[str, Any] = field(default_factory=dict)  # every KV pool source, compared (serve.kvsources)
    preflight: list[dict[str, Any]] = field(
        default_factory=list
    )  # every pre-boot check (node, check, status, ...)
    # node -> Transport.to_dict(): the network its collectives used, from its log (docs/engines.md, "NCCL
    # transport lines"); only nodes whose log had such a line
    transport: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, str] = field(default_factory=dict)  # pattern name -> first raw matched line (head)
    phases: list[BootPhase] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def number(text: str) -> float:
    """A number as engines print it in their logs ("100,000" -> 100000.0)."""
    return float(text.replace(",", ""))


FATAL_COMMON: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"does not expose the metadata layout"), "InstantTensor load format is broken in this image"),
    (
        re.compile(r"CUDA out of memory|torch\.OutOfMemoryError|CUDA error: out of memory"),
        "CUDA out of memory",
    ),
    (re.compile(r"Engine core initialization failed"), "engine core initialization failed"),
    (re.compile(r"EngineDeadError"), "engine died"),
)

TRACEBACK = re.compile(r"Traceback \(most recent call last\):")
# A multi-process engine prefixes each line of a worker's output: "(EngineCore_DP0 pid=7) ", "(RayWorker pid=9, ip=..) "
PROCESS_PREFIX = re.compile(r"^\([^()]*\bpid=\d+[^()]*\) ?")
EXC_LINE = re.compile(r"(?:^|[\s)\]])((?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit))(?::|\s*$)")


class BootLog:
    """Incremental parser of one node's log: feed text chunks, get boot phases, facts and fatal lines."""

    def __init__(self, engine: Engine, node: str, head: bool):
        self.engine = engine
        self.node = node
        self.head = head
        self._partial = ""
        self._in_traceback = False
        self.fatal: tuple[str, str] | None = None  # (description, line)
        self.matches: list[tuple[str, str, re.Match]] = []  # (name, line, match)
        self.transport = TransportReader()  # every line, not only the patterns' (serve.transport)

    def feed(self, text: str) -> list[tuple[BootPattern, str]]:
        """Parse complete lines of `text` (a trailing partial line waits for the next chunk)."""
        data = self._partial + text
        lines = data.split("\n")
        self._partial = lines.pop()
        found = []
        for raw in lines:
            line = ANSI.sub("", raw).rstrip("\r")
            found += self._line(line)
        return found

    def flush(self) -> list[tuple[BootPattern, str]]:
        rest, self._partial = self._partial, ""
        return self._line(ANSI.sub("", rest)) if rest else []

    def _line(self, line: str) -> list[tuple[BootPattern, str]]:
        if self.fatal is None:
            hit = self.engine.fatal_reason(line)
            if hit:
                self.fatal = (hit, line)
            else:
                self._follow_traceback(line)
        self.transport.feed(line)
        found = []
        for pat in self.engine.patterns:
            m = pat.regex.search(line)
            if m:
                kept = excerpt(line, m)
                self.matches.append((pat.name, kept, m))
                found.append((pat, kept))
        return found

    def _follow_traceback(self, line: str) -> None:
        """An uncaught exception is the "...Error: ..." line that ends a traceback. The traceback ends at its first
        line that is neither indented nor a "File ..." line, so a later line that merely names an error is not fatal."""
        body = PROCESS_PREFIX.sub("", line)
        if TRACEBACK.search(body):
            self._in_traceback = True
        elif not self._in_traceback or body.lstrip().startswith("File "):
            return
        elif EXC_LINE.search(body):
            self.fatal = ("uncaught exception", line)
        elif not body[:1].isspace():
            self._in_traceback = False


class Engine:
    """Base adapter. Subclasses set `kind`, `patterns`, `fatal`, `probes` and implement `launch`; what code
    outside the adapter decides by kind is the kind's row of the engine facts table (`kind_facts`)."""

    kind = ""
    patterns: tuple[BootPattern, ...] = ()
    fatal: tuple[tuple[re.Pattern, str], ...] = FATAL_COMMON
    ready_pattern: str | None = None  # the BootPattern name that says "ready" in the log
    help_flag = "--help"  # what makes the serving command list every flag it takes (`labkit doctor`)
    package = ""  # the Python package holding the engine's code (`labkit doctor --probe` searches it)
    # Serving flags labkit knows the engine takes, checked against when the image's own --help cannot be asked
    # (docs/engines.md, "Known flags and the sweep flag check"); empty: nothing known.
    known_flags: frozenset[str] = frozenset()
    # (pattern name, KV pool source) of the log lines stating the pool; kv_pool_tokens comes from the first found
    kv_lines: tuple[tuple[str, str], ...] = (("kv_tokens", "log"),)

    @classmethod
    def for_plan(cls, plan: LanePlan) -> Engine:
        """The adapter for a plan of this kind (the registry's constructor; one whose parsing depends on the
        plan, as the simulator's flavor does, overrides it)."""
        return cls()

    @property
    def kind_facts(self) -> EngineFacts:
        """This kind's row of the engine facts table."""
        return engine_facts(self.kind)

    def command(self, python: str = "python3") -> tuple[str, ...]:
        """The serving program before its flags, as the launches start it (e.g. `vllm serve`)."""
        raise NotImplementedError

    def launch(self, plan: LanePlan, nodes: list[NodeSpec], python: str = "python3") -> list[NodeLaunch]:
        raise NotImplementedError

    def probes(self, plan: LanePlan) -> list[Probe]:
        return [Probe("/health"), Probe("/v1/models")]

    def fatal_reason(self, line: str) -> str | None:
        for regex, reason in self.fatal:
            if regex.search(line):
                return reason
        return None

    def boot_log(self, node: str, head: bool) -> BootLog:
        return BootLog(self, node, head)

    def facts(self, matches: list[tuple[str, str, re.Match]]) -> BootFacts:
        """BootFacts from (pattern name, line, match) triples; first match of each pattern wins."""
        facts = BootFacts()
        for name, line, m in matches:
            if name in facts.lines:
                continue
            facts.lines[name] = line
            self.apply(facts, name, m)
        return facts

    def apply(self, facts: BootFacts, name: str, m: re.Match) -> None:
        """Copy one match's numbers into `facts` (per engine)."""

    def kv_tokens(self, name: str, m: re.Match) -> int:
        """The token count a KV pool line states (its first group, thousands separators removed)."""
        return int(number(m.group(1)))

    def kv_sources(self, facts: BootFacts) -> dict[str, dict[str, Any]]:
        """The KV pool as the head's boot log states it: {source: {tokens, raw, line}} for each of `kv_lines`
        found, `raw` the line as logged (labkit.serve.kvsources compares them with the API's figures)."""
        regex = {p.name: p.regex for p in self.patterns}
        out: dict[str, dict[str, Any]] = {}
        for name, source in self.kv_lines:
            raw = facts.lines.get(name)
            m = regex[name].search(raw) if raw else None
            if m:
                out[source] = {"tokens": self.kv_tokens(name, m), "raw": raw, "line": name}
        return out


LINE_KEEP = (
    400  # characters of a matched log line kept in the facts; longer lines keep their start and the match
)


def excerpt(line: str, m: re.Match, keep: int = LINE_KEEP) -> str:
    """The matched line as stored: whole when short, else its start and the text around the match (vLLM's
    engine-core config line runs to several KB and would otherwise fill every record's boot facts)."""
    if len(line) <= keep:
        return line
    head, side = keep // 3, keep // 3
    lo, hi = max(0, m.start() - side), min(len(line), m.end() + side)
    if lo <= head:
        return line[:hi] + (" …" if hi < len(line) else "")
    return line[:head] + " … " + line[lo:hi] + (" …" if hi < len(line) else "")


def pattern(name: str, regex: str, label: str) -> BootPattern:
    return BootPattern(name, re.compile(regex), label)


def model_flags_present(plan: LanePlan, *flags: str) -> bool:
    return any(plan.engine.arg(f) is not None for f in flags)


def check_nodes(plan: LanePlan, nodes: list[NodeSpec], facts: EngineFacts) -> None:
    """Refuse a node count the engine cannot run on (facts.nodes "one": exactly one node)."""
    if facts.nodes == "one" and len(nodes) != 1:
        raise LabkitError(
            f"{plan.file}: engine.kind {facts.kind} runs on one node, but cluster.nodes has {len(nodes)}"
        )


def parallel_flags(
    plan: LanePlan, facts: EngineFacts, axes: tuple[str, ...] = ("tp", "pp", "dp", "ep")
) -> list[str]:
    """The parallelism flags labkit adds for engine.parallel, in `axes` order: an axis above 1 gets the first
    of its flags (facts.parallel) and its size, or the flag alone when it is a switch; none when the recipe's
    args already give one of that axis's flags (recipe args win)."""
    par, table = plan.engine.parallel, facts.parallel
    out: list[str] = []
    for axis in axes:
        flags, value = table.axis(axis), getattr(par, axis)
        if not flags or value <= 1 or model_flags_present(plan, *flags):
            continue
        out += [flags[0]] if axis == "ep" and table.ep_switch else [flags[0], str(value)]
    return out


def env_tuple(
    plan: LanePlan, extra: dict[str, str], defaults: dict[str, str] | None = None, node: str | None = None
) -> tuple[tuple[str, str], ...]:
    """Derived defaults first (the fabric's NCCL/GLOO/TP settings for `node`'s interface, the compile caches'
    folders, an engine's own), then the recipe env (which wins over them), then per-node values (which win over
    all); order kept for readable commands."""
    merged = fabric_env(plan, node)
    merged.update(plan.compile_cache_env)
    merged.update(defaults or {})
    merged.update(plan.engine.env)
    merged.update(extra)
    return tuple(merged.items())


__all__ = [
    "BootFacts",
    "BootLog",
    "BootPattern",
    "BootPhase",
    "Engine",
    "NodeLaunch",
    "NodeSpec",
    "Probe",
    "check_nodes",
    "env_tuple",
    "excerpt",
    "model_flags_present",
    "number",
    "parallel_flags",
    "pattern",
]
