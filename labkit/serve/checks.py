"""Running the pre-boot checks on a lane's nodes: every node read at once, an absent image pulled (before the
boot timer starts) and compared again, the page cache dropped; and `labkit doctor`, the same checks as a
report plus the engine's own flags and probes asked of the image on the head node.

The commands and parsers are pure, in labkit.serve.preflight, holders and enginehelp; these functions read
the lane's `LaneState` (labkit.serve.state) and run nothing but those commands: nothing is started.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from labkit.nodes import Host, HostError, Result
from labkit.serve.enginehelp import flag_checks, help_argv, in_image, lane_flags, probe_checks, probe_command
from labkit.serve.plan import launches, python_for
from labkit.serve.preflight import (
    DROP_CACHES_COMMAND,
    PULL_PROGRESS,
    ImageState,
    Readings,
    commands,
    detected_addresses,
    drop_check,
    evaluate,
    image_command,
    parse_image,
    parse_meminfo,
    pull_command,
)
from labkit.serve.reach_run import reach
from labkit.serve.state import LaneState
from labkit.serve.verdict import FAIL, SKIP, WARN, Check, ordered

CHECK_TIMEOUT = 60.0  # seconds per check command on a node
PULL_TIMEOUT = 3600.0  # a first pull of a Spark image is tens of GB
DROP_TIMEOUT = 300.0  # sync writes back whatever is dirty first
HELP_TIMEOUT = 300.0  # the engine's --help imports it (vLLM: 5-15 s)


@dataclass
class Preflight:
    """The pre-boot checks of one start (or doctor run): every check, the fabric addresses detected, timings."""

    checks: list[Check]
    addresses: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    pull_seconds: float = 0.0

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.failed]

    def facts(self, check: str) -> dict[str, dict]:
        """{node: facts} of one check ("image", "memory", ...)."""
        return {c.node: c.facts for c in self.checks if c.check == check}


def read_node(host: Host, wanted: dict[str, str]) -> Readings:
    """One node's answers to `wanted` ({reading: command}); `error` set when the node cannot be asked."""
    rd = Readings(host.name)
    try:
        for name, command in wanted.items():
            rd.results[name] = host.run(command, timeout=CHECK_TIMEOUT)
    except HostError as e:
        rd.error = e.message
    return rd


def read_nodes(lane: LaneState) -> dict[str, Readings]:
    """Every node's readings, all nodes at once (a Ctrl-C ends the wait; the commands only read)."""
    outcomes = lane.group.begin(lambda h: read_node(h, commands(lane.plan, h.name))).outcomes()
    return {
        n: value if value is not None else Readings(n, error=f"{type(err).__name__}: {err}")
        for n, (value, err) in outcomes.items()
    }


def absent_image(readings: dict[str, Readings]) -> list[str]:
    """Nodes whose docker said "No such image" (not: nodes where docker could not answer)."""
    return [
        n
        for n, rd in readings.items()
        if "image" in rd.results and parse_image(rd.results["image"]) == ImageState(False)
    ]


def pull_absent(lane: LaneState, readings: dict[str, Readings]) -> float:
    """`docker pull` on the nodes that lack the image, with docker's status lines as progress, then its ID read
    again; returns the seconds it took (0 when every node had it)."""
    image = lane.plan.engine.image
    absent = absent_image(readings)
    if not absent or image is None:  # only a docker lane (it has an image) reads one
        return 0.0
    lane.say(
        f"image {image}: not on {', '.join(absent)}; pulling it there first (the boot timer has not started)"
    )
    t = time.monotonic()

    def pull(h: Host) -> tuple[Result, Result]:
        def progress(line: str) -> None:
            if PULL_PROGRESS.search(line):
                lane.say(f"  {h.name}: {line.strip()}")

        r = h.run_streaming(pull_command(image), timeout=PULL_TIMEOUT, on_line=progress)
        return r, h.run(image_command(image), timeout=CHECK_TIMEOUT)

    hosts = [h for h in lane.group if h.name in absent]
    for node, (value, err) in lane.group.begin(pull, hosts).outcomes().items():
        if value is None:
            readings[node].pulled = err.message if isinstance(err, HostError) else str(err)
            continue
        r, after = value
        readings[node].pulled = (
            "" if r.ok else ((r.stderr.strip() or r.stdout.strip()).splitlines() or ["?"])[-1]
        )
        readings[node].results["image"] = after
    seconds = time.monotonic() - t
    done = [n for n in absent if readings[n].pulled == ""]
    lane.say(f"image {image}: pulled on {', '.join(done) or 'no node'} in {seconds:.1f} s")
    return seconds


def drop_page_cache(lane: LaneState, readings: dict[str, Readings]) -> list[Check]:
    """`sync; echo 3 > /proc/sys/vm/drop_caches` (sudo -n unless root) on every node; said per node when not."""
    outcomes = lane.group.begin(lambda h: h.run(DROP_CACHES_COMMAND, timeout=DROP_TIMEOUT)).outcomes()
    out = []
    for node, (r, err) in outcomes.items():
        before = parse_meminfo(readings[node].results["meminfo"].stdout)
        why = "" if err is None else (err.message if isinstance(err, HostError) else str(err))
        out.append(drop_check(node, r, before, why, lane.plan.cluster.min_free_after_drop))
    return out


def preflight(lane: LaneState, pull: bool = True, drop: bool = True) -> Preflight:
    """Every check on every node. With `pull`, an absent image is pulled (only when nothing else failed, so a
    refused start does not wait for a pull first); without, its absence is a warning. With `drop` and
    engine.drop_caches, the page cache is dropped once every check passed."""
    t = time.monotonic()
    plan, head, nodes = lane.plan, lane.group.head.name, lane.group.names
    readings = read_nodes(lane)
    reached = reach(lane, readings)  # every node to the head's rendezvous address (labkit.serve.reach)
    absent = (FAIL, "not pulled, since other checks failed") if pull else (WARN, "the start pulls it first")
    checks = ordered(evaluate(plan, lane.lane_id, readings, head, absent) + reached, nodes)
    pull_seconds = 0.0
    missing = set(absent_image(readings))
    others = [c for c in checks if c.failed and not (c.check == "image" and c.node in missing)]
    if pull and missing and not others:
        pull_seconds = pull_absent(lane, readings)
        after = evaluate(plan, lane.lane_id, readings, head, (FAIL, "still not present after docker pull"))
        checks = ordered(after + reached, nodes)
    if drop and plan.engine.drop_caches and not any(c.failed for c in checks):
        checks = ordered(checks + drop_page_cache(lane, readings), nodes)
    return Preflight(checks, detected_addresses(plan, readings), time.monotonic() - t, pull_seconds)


# ---------------------------------------------------------------------------------------------- labkit doctor


def doctor(lane: LaneState, probes: list[str] | tuple[str, ...] = (), pull: bool = False) -> list[Check]:
    """The pre-boot checks as a report (nothing started, the page cache left alone, the image pulled only with
    `pull`), plus on the head: the lane's flags against the engine's own --help and each probe."""
    report = preflight(lane, pull=pull, drop=False)
    checks = list(report.checks)
    head = lane.group.head
    blocked = head_problem(lane, checks)
    if blocked:
        checks.append(Check(head.name, "engine args", SKIP, f"not checked: {blocked}"))
        checks += [Check(head.name, "probe", SKIP, f"{n}: not checked: {blocked}") for n in probes]
    else:
        checks += engine_flags(lane, head, report.addresses)
        if probes:
            checks += engine_probes(lane, head, list(probes))
    return ordered(checks, lane.group.names)


def head_problem(lane: LaneState, checks: list[Check]) -> str:
    """Why the head cannot run the engine's own CLI ("" when it can): unreachable, or the image not there."""
    head = lane.group.head.name
    for c in checks:
        if c.node == head and c.check == "ssh":
            return "the head cannot be reached"
        if c.node == head and c.check == "image" and not c.facts.get("id"):
            return f"{lane.plan.engine.image} is not on the head (`labkit doctor --pull` pulls it)"
    return ""


def ask_help(lane: LaneState, head: Host) -> tuple[str, Result | None, str]:
    """The engine's own --help run on the head (in the image for a docker lane): (the command as shown, its
    Result or None, why it could not run). Shared by doctor and labkit.serve.flagcheck."""
    plan = lane.plan
    argv = help_argv(lane.engine, python_for(plan, lane.group.hosts))
    shown = f"`{' '.join(argv)}`" + (f" in {plan.engine.image}" if plan.engine.runtime == "docker" else "")
    lane.say(f"asking {shown} on {head.name} for its flags")
    try:
        return shown, head.run(in_image(plan, argv, gpus=True), timeout=HELP_TIMEOUT), ""
    except HostError as e:
        return shown, None, e.message


def engine_flags(lane: LaneState, head: Host, detected: dict[str, str]) -> list[Check]:
    """Every flag the lane sends (engine.args and labkit's own, with the fabric addresses `detected`) looked
    up in the engine's --help output."""
    shown, r, why = ask_help(lane, head)
    if r is None:
        return [Check(head.name, "engine args", FAIL, f"{shown} could not run: {why}")]
    flags = lane_flags(
        lane.plan,
        launches(lane.plan, lane.group.hosts, detected),
        lane.engine.command(python_for(lane.plan, lane.group.hosts)),
    )
    return flag_checks(head.name, lane.plan.engine.kind, shown, flags, r)


def engine_probes(lane: LaneState, head: Host, names: list[str]) -> list[Check]:
    """Whether the engine's package in the image (on the head) contains each name, one `grep -rl` each."""
    plan, package = lane.plan, lane.engine.package
    python = python_for(plan, lane.group.hosts)
    lane.say(f"searching the {package} package on {head.name} for {', '.join(names)}")
    try:
        r = head.run(probe_command(plan, python, package, names), timeout=HELP_TIMEOUT)
    except HostError as e:
        return [Check(head.name, "probe", FAIL, f"cannot search the {package} package: {e.message}")]
    return probe_checks(head.name, package, names, r)
