"""Pre-boot checks as data: the node-side commands, parsers of what they print, and one `Check` per node and
check, which the lane's start refuses on and `labkit doctor` reports (docs/engines.md, "Pre-boot checks and
labkit doctor").

Pure: labkit.serve.checks runs `commands(plan)` on every node, collects the Results into `Readings` and
hands them to `evaluate`. What holds a node's GPU, and the page cache, are in labkit.serve.holders.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

from labkit.nodes import Result, all_addresses, no_address, routable
from labkit.recipe import LanePlan
from labkit.serve.bootstate import state_check, state_command
from labkit.serve.fabric import detect_command, undetected
from labkit.serve.holders import CONTAINERS_COMMAND, GPU_APPS_COMMAND, GPU_INFO_COMMAND, gpu_check
from labkit.serve.netcheck import ALL_ADDRESSES_COMMAND, fabric_net_checks
from labkit.serve.verdict import FAIL, OK, WARN, Check, ordered
from labkit.units import format_size


@dataclass
class Readings:
    """What one node answered: {reading name: Result} for the commands of `commands(plan)`; `error` when the
    node could not be asked at all; `pulled` the outcome of a pull ("" pulled, else docker's complaint)."""

    node: str
    results: dict[str, Result] = field(default_factory=dict)
    error: str = ""
    pulled: str | None = None


def commands(plan: LanePlan, node: str | None = None) -> dict[str, str]:
    """{reading: the shell command `node` runs for it}, only what this lane's checks need (the fabric readings
    name the node's own interface, `FabricSpec.interface_of`)."""
    out = {}
    if plan.engine.runtime == "docker" and plan.engine.image:
        out["image"] = image_command(plan.engine.image)
    fabric = plan.cluster.fabric
    if fabric is not None:
        out["link"] = link_command(fabric.interface_of(node))
        out["addresses"] = detect_command(fabric.interface_of(node))
        out["all_addresses"] = ALL_ADDRESSES_COMMAND
        if fabric.rdma:
            out["rdma"] = RDMA_COMMAND
    out["meminfo"] = MEMINFO_COMMAND
    out["containers"] = CONTAINERS_COMMAND
    out["gpu_apps"] = GPU_APPS_COMMAND
    out["gpu_info"] = GPU_INFO_COMMAND
    out["state"] = state_command(plan, node)
    return out


# ---------------------------------------------------------------------------------------------- the image

# One line: the image ID, then its RepoDigests as JSON (`[]` for an image built locally, `null` on some daemons).
IMAGE_FORMAT = "{{.Id}} {{json .RepoDigests}}"


@dataclass(frozen=True)
class ImageState:
    present: bool
    id: str = ""
    digests: tuple[str, ...] = ()
    error: str = ""  # docker could not answer (no daemon, no docker): neither present nor absent


def image_command(image: str) -> str:
    return shlex.join(["docker", "image", "inspect", "--format", IMAGE_FORMAT, image])


def pull_command(image: str) -> str:
    return shlex.join(["docker", "pull", image])


def parse_image(r: Result) -> ImageState:
    """`docker image inspect --format IMAGE_FORMAT`: the ID and digests, absent on "No such image"."""
    if r.ok:
        first = (r.stdout.strip().splitlines() or [""])[0]
        image_id, _, rest = first.partition(" ")
        if not image_id.startswith("sha256:"):
            return ImageState(False, error=f"unexpected docker image inspect output {first[:120]!r}")
        try:
            digests = json.loads(rest) if rest.strip() else []
        except ValueError:
            digests = []
        return ImageState(True, image_id, tuple(digests or ()))
    text = (r.stderr.strip() or r.stdout.strip())[-300:]
    if "No such image" in text:
        return ImageState(False)
    return ImageState(False, error=text or f"docker image inspect failed (exit {r.exit_code})")


def short_id(image_id: str) -> str:
    """sha256:0123456789ab, as `docker images` shortens IDs."""
    return image_id[: len("sha256:") + 12]


# Pull output worth relaying as progress; per-layer lines ("Downloading", "Extracting", ...) are not.
PULL_PROGRESS = re.compile(r": Pulling from |^Digest: |^Status: |rror")


def image_checks(
    image: str,
    states: dict[str, ImageState],
    pulled: dict[str, str | None],
    head: str,
    absent: tuple[str, str],
) -> list[Check]:
    """The image on every node, compared with the head's ID (or the first node that has it); `absent` is the
    (status, note) of a node without it: FAIL after a pull, a warning in a report that pulls nothing."""
    present = {n: s for n, s in states.items() if s.present}
    ref_node = head if head in present else next(iter(present), None)
    ref = present[ref_node].id if ref_node else ""
    out = []
    for node, st in states.items():
        facts = {
            "image": image,
            "id": st.id,
            "repo_digests": list(st.digests),
            "pulled": pulled.get(node) == "",
        }
        why = pulled.get(node)
        if st.error:
            out.append(Check(node, "image", FAIL, f"{image}: {st.error}", facts))
        elif not st.present:
            note = f"docker pull failed: {why}" if why else absent[1]
            out.append(Check(node, "image", absent[0], f"{image} not present ({note})", facts))
        elif st.id != ref:
            text = f"{image} is {short_id(st.id)}, but {short_id(ref)} on {ref_node}: the nodes run different images"
            out.append(Check(node, "image", FAIL, text, facts))
        else:
            text = f"{image} {short_id(st.id)}" + (" (pulled now)" if facts["pulled"] else "")
            out.append(Check(node, "image", OK, text, facts))
    return out


# ---------------------------------------------------------------------------------------------- the fabric

# `ip -o link show dev IF`: "3: enp1s0f1np1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP mode ..."
LINK = re.compile(r"^\d+:\s+(\S+?)(?:@\S+)?:\s+<([^>]*)>.*?\bstate\s+(\S+)", re.M)


def link_command(interface: str) -> str:
    return shlex.join(["ip", "-o", "link", "show", "dev", interface])


def fabric_check(node: str, interface: str, link: Result, addrs: Result, given: str | None) -> Check:
    """The interface exists, is up with a carrier (flags UP and LOWER_UP), and has an IPv4 address (the one
    the recipe gives, when it gives one)."""
    m = LINK.search(link.stdout) if link.ok else None
    if m is None:
        why = link.stderr.strip() or link.stdout.strip() or f"ip link failed (exit {link.exit_code})"
        return Check(node, "fabric", FAIL, f"{interface}: {why}")
    flags, state = m.group(2).split(","), m.group(3)
    facts = {"interface": interface, "state": state, "flags": flags}
    if "UP" not in flags or "LOWER_UP" not in flags:
        why = "administratively down" if "UP" not in flags else "no carrier (cable or peer down)"
        return Check(node, "fabric", FAIL, f"{interface} is down: state {state}, {why}", facts)
    found = all_addresses(addrs.stdout) if addrs.ok else []
    facts["addresses"] = found
    if given is None and not routable(found):
        return Check(node, "fabric", FAIL, f"{interface} is up but has {no_address(found)}", facts)
    if given is not None and given not in found:
        text = (
            f"{interface} has {', '.join(found) or 'no IPv4 address'}, not {given} (cluster.fabric.addresses)"
        )
        return Check(node, "fabric", FAIL, text, facts)
    address = given or routable(found)[0]
    source = "recipe" if given else "detected"
    return Check(node, "fabric", OK, f"{interface} up (state {state}), address {address} ({source})", facts)


# ---------------------------------------------------------------------------------------------- RDMA devices

# Mellanox's `ibdev2netdev` when installed (MLNX_OFED / DOCA), else the kernel's RDMA device list.
RDMA_COMMAND = (
    "if command -v ibdev2netdev >/dev/null 2>&1; then ibdev2netdev; "
    "else echo '# /sys/class/infiniband'; ls -1 /sys/class/infiniband; fi"
)
# "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)"
IBDEV = re.compile(r"^(\S+) port (\d+) ==> (\S+) \((\w+)\)\s*$")


def parse_rdma(r: Result) -> tuple[dict[str, list[tuple[int, str, str]]], str]:
    """({device: [(port, netdev, state)]}, source); a sysfs listing gives names only (port 0, state "")."""
    lines = [line.strip() for line in r.stdout.splitlines() if line.strip()]
    if lines and lines[0].startswith("# /sys/class/infiniband"):
        return {name: [(0, "", "")] for name in lines[1:]}, "/sys/class/infiniband"
    devices: dict[str, list[tuple[int, str, str]]] = {}
    for line in lines:
        m = IBDEV.match(line)
        if m:
            devices.setdefault(m.group(1), []).append((int(m.group(2)), m.group(3), m.group(4)))
    return devices, "ibdev2netdev"


def rdma_check(node: str, hcas: tuple[str, ...], r: Result) -> Check:
    """Every HCA of the recipe ("rocep1s0f1", or "mlx5_0:1" with a port) listed, and not Down."""
    devices, source = parse_rdma(r)
    facts = {"source": source, "devices": {d: [list(p) for p in ports] for d, ports in devices.items()}}
    problems = []
    for hca in hcas:
        name, _, port = hca.partition(":")
        ports = [p for p in devices.get(name, []) if not port or p[0] in (0, int(port))]
        if not ports:
            problems.append(f"{hca} missing")
        problems += [f"{name} port {p} ==> {nd} is {st}" for p, nd, st in ports if st and st.lower() != "up"]
    if problems:
        listed = ", ".join(sorted(devices)) or "none"
        if not devices and r.stderr.strip():
            listed += f"; {r.stderr.strip().splitlines()[-1]}"
        return Check(node, "rdma", FAIL, "; ".join(problems) + f" (listed by {source}: {listed})", facts)
    return Check(node, "rdma", OK, f"{', '.join(hcas)} present ({source})", facts)


# ---------------------------------------------------------------------------------------------- memory

MEMINFO_COMMAND = "cat /proc/meminfo"
MEMINFO_KEYS = ("MemTotal", "MemFree", "MemAvailable", "Cached")
MEMINFO_LINE = re.compile(r"^(\w+):\s+(\d+)(?:\s+kB)?\s*$", re.M)


def parse_meminfo(text: str) -> dict[str, int]:
    """{MemTotal, MemFree, MemAvailable, Cached: bytes} of /proc/meminfo (its kB are KiB)."""
    values = {k: int(v) * 1024 for k, v in MEMINFO_LINE.findall(text)}
    return {k: values[k] for k in MEMINFO_KEYS if k in values}


def memory_check(node: str, r: Result, minimum: int | None) -> Check:
    """MemAvailable recorded; below `cluster.min_free_memory` (when the recipe sets one) refuses the node."""
    info = parse_meminfo(r.stdout) if r.ok else {}
    if "MemAvailable" not in info or "MemTotal" not in info:
        why = r.stderr.strip() or "no MemAvailable in /proc/meminfo"
        return Check(node, "memory", FAIL if minimum is not None else WARN, f"cannot read memory: {why}")
    text = (
        f"MemAvailable {format_size(info['MemAvailable'])} of {format_size(info['MemTotal'])}"
        f" (page cache {format_size(info.get('Cached', 0))})"
    )
    if minimum is not None and info["MemAvailable"] < minimum:
        text += f": below cluster.min_free_memory {format_size(minimum)}"
        return Check(node, "memory", FAIL, text, info)
    return Check(node, "memory", OK, text + (f", minimum {format_size(minimum)}" if minimum else ""), info)


# ---------------------------------------------------------------------------------------------- the page cache

# Best effort: as root directly, else through sudo without a password prompt (-n fails at once instead).
DROP_CACHES_COMMAND = (
    'sync; if [ "$(id -u)" = 0 ]; then echo 3 > /proc/sys/vm/drop_caches; '
    "else echo 3 | sudo -n tee /proc/sys/vm/drop_caches > /dev/null; fi; rc=$?; "
    "echo '# /proc/meminfo'; cat /proc/meminfo; exit $rc"
)


def drop_check(
    node: str, r: Result | None, before: dict[str, int], error: str = "", minimum: int | None = None
) -> Check:
    """The page cache dropped, with the cache and MemFree before and after; a warning when it could not, unless
    MemFree after it is below `minimum` (cluster.min_free_after_drop): then the boot is refused, whether the
    drop worked or not (docs/engines.md, "Memory after the page-cache drop")."""
    after = parse_meminfo(r.stdout.split("# /proc/meminfo", 1)[-1]) if r is not None else {}
    facts = {"dropped": bool(r is not None and r.ok), "before": before, "after": after, "minimum": minimum}
    free = after.get("MemFree")
    short = minimum is not None and (free is None or free < minimum)
    gate = ""
    if minimum is not None:
        shown = "unknown" if free is None else format_size(free)
        gate = f"; MemFree {shown} after it, " + (
            f"below cluster.min_free_after_drop {format_size(minimum)}"
            if short
            else f"minimum {format_size(minimum)}"
        )
    if r is not None and r.ok:
        change = ""
        if "Cached" in before and "Cached" in after:
            change = f" (page cache {format_size(before['Cached'])} -> {format_size(after['Cached'])})"
        return Check(node, "page cache", FAIL if short else OK, "dropped" + change + gate, facts)
    if error or r is None:
        why = error or "not run"
    else:
        why = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.exit_code}"
    if short:
        return Check(node, "page cache", FAIL, f"not dropped: {why}{gate}", facts)
    return Check(node, "page cache", WARN, f"not dropped: {why}{gate} (the boot goes on)", facts)


# ---------------------------------------------------------------------------------------------- all of it


def evaluate(
    plan: LanePlan,
    lane_id: str,
    readings: dict[str, Readings],
    head: str,
    absent: tuple[str, str] = (FAIL, ""),
) -> list[Check]:
    """Every node's checks from its readings, ordered by node, then check (ORDER)."""
    out: list[Check] = []
    fabric = plan.cluster.fabric
    strict_gpu = plan.engine.runtime == "docker"  # process lanes are the CPU ones here: a warning only
    for node, rd in readings.items():
        if rd.error:
            out.append(Check(node, "ssh", FAIL, rd.error))
            continue
        res = rd.results
        if fabric is not None:
            iface = fabric.interface_of(node)
            out.append(fabric_check(node, iface, res["link"], res["addresses"], fabric.address(node)))
            if fabric.rdma:
                out.append(rdma_check(node, fabric.hcas, res["rdma"]))
        out.append(memory_check(node, res["meminfo"], plan.cluster.min_free_memory))
        out.append(gpu_check(node, lane_id, res["containers"], res["gpu_apps"], res["gpu_info"], strict_gpu))
        out.append(state_check(node, res["state"]))
    if fabric is not None:
        read = {n: rd.results for n, rd in readings.items() if not rd.error}
        links = {n: res["link"] for n, res in read.items()}
        out += fabric_net_checks(
            {n: fabric.interface_of(n) for n in links},
            links,
            {n: res["all_addresses"] for n, res in read.items() if "all_addresses" in res},
            head,
        )
    images = {n: parse_image(rd.results["image"]) for n, rd in readings.items() if "image" in rd.results}
    if images and plan.engine.image is not None:  # only a docker lane (it has an image) reads one
        pulled = {n: readings[n].pulled for n in images}
        out += image_checks(plan.engine.image, images, pulled, head, absent)
    return ordered(out, list(readings))


def detected_addresses(plan: LanePlan, readings: dict[str, Readings]) -> dict[str, str]:
    """{node: its first routable IPv4 address on the fabric interface} for the nodes the recipe gives none for."""
    out = {}
    for node in undetected(plan, list(readings)):
        r = readings[node].results.get("addresses")
        found = routable(all_addresses(r.stdout)) if r is not None and r.ok else []
        if found:
            out[node] = found[0]
    return out
