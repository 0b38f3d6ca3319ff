"""What holds a node's GPU before a lane boots: containers of other lanes or engines (`docker ps`) and GPU
compute processes (`nvidia-smi`), plus the GPU's name and driver for the record (docs/engines.md, "Pre-boot
checks and labkit doctor"). Pure: the commands and the parsers of what they print.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from labkit.nodes import Result
from labkit.serve.runtimes import LABEL
from labkit.serve.verdict import FAIL, OK, SKIP, WARN, Check

# Docker turns the two characters `\t` of a --format into a tab, as it does for `docker ps --format` by hand.
CONTAINERS_FORMAT = "{{.Names}}\\t{{.Image}}\\t{{.Labels}}"
CONTAINERS_COMMAND = shlex.join(["docker", "ps", "--format", CONTAINERS_FORMAT])
# One line per compute process: "4242, /usr/bin/python3, 81920 MiB" ("[N/A]" where the driver has no figure).
GPU_APPS_COMMAND = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader"
# One line per GPU: "0, NVIDIA GB10, 580.95.05, [N/A]" (the GB10's unified memory has no memory.total).
GPU_INFO_COMMAND = "nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader"
GPU_INFO_FIELDS = ("index", "name", "driver_version", "memory.total")

# An image "looks like an engine" when its name contains one of these, or has one of SHORT_WORDS as a whole
# component (nvcr.io/nim/..., ghcr.io/huggingface/tgi): what else would sit on the GPU of a serving node.
ENGINE_WORDS = (
    "vllm",
    "sglang",
    "llama",
    "tensorrt",
    "trtllm",
    "lmdeploy",
    "ollama",
    "text-generation",
    "triton",
)
SHORT_WORDS = ("nim", "tgi")


@dataclass(frozen=True)
class Container:
    name: str
    image: str
    labels: dict

    def describe(self) -> str:
        lane = self.labels.get(LABEL)
        return f"container {self.name} ({self.image}" + (f", lane {lane})" if lane else ")")


@dataclass(frozen=True)
class GpuApp:
    pid: str
    name: str
    memory: str

    def describe(self) -> str:
        return f"process {self.pid} {self.name} ({self.memory})"


def parse_labels(text: str) -> dict[str, str]:
    """Docker's `{{.Labels}}`: "k=v,k2=v2" ("" when none)."""
    out = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if key.strip():
            out[key.strip()] = value if sep else ""
    return out


def parse_containers(stdout: str) -> list[Container]:
    out = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        name, _, rest = line.partition("\t")
        image, _, labels = rest.partition("\t")
        out.append(Container(name.strip(), image.strip(), parse_labels(labels.strip())))
    return out


def looks_like_engine(image: str) -> bool:
    name = image.lower()
    parts = re.split(r"[/:@._-]+", name)
    return any(w in name for w in ENGINE_WORDS) or any(w in parts for w in SHORT_WORDS)


def foreign(containers: list[Container], lane_id: str) -> list[Container]:
    """Running containers that are not this lane's: another labkit lane's (they all get `--gpus all`), or any
    whose image looks like an engine."""
    return [
        c
        for c in containers
        if c.labels.get(LABEL) != lane_id and (LABEL in c.labels or looks_like_engine(c.image))
    ]


def parse_gpu_apps(stdout: str) -> list[GpuApp]:
    out = []
    for line in stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 3 and fields[0].isdigit():
            out.append(GpuApp(fields[0], fields[1], ", ".join(fields[2:])))
    return out


def parse_gpu_info(stdout: str) -> list[dict[str, str]]:
    out = []
    for line in stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == len(GPU_INFO_FIELDS):
            out.append(dict(zip(GPU_INFO_FIELDS, fields, strict=True)))
    return out


def tool_problem(r: Result, tool: str) -> str:
    """ "" when the tool answered, else why not ("docker not found", "nvidia-smi: <its complaint>")."""
    if r.ok:
        return ""
    text = (r.stderr.strip() or r.stdout.strip()).splitlines()
    if r.exit_code == 127 or (text and text[-1].endswith(("not found", "No such file or directory"))):
        return f"{tool} not found"
    return f"{tool}: " + (text[-1][:200] if text else f"exit {r.exit_code}")


def gpu_check(
    node: str, lane_id: str, containers: Result, apps: Result, info: Result, strict: bool = True
) -> Check:
    """Nothing else on the GPU: no foreign container (docker ps) and no compute process (nvidia-smi). A holder
    fails the check when `strict` (docker lanes), else it is a warning (the CPU process lanes)."""
    problems = [p for p in (tool_problem(containers, "docker"), tool_problem(apps, "nvidia-smi")) if p]
    held = (
        [c.describe() for c in foreign(parse_containers(containers.stdout), lane_id)] if containers.ok else []
    )
    held += [a.describe() for a in parse_gpu_apps(apps.stdout)] if apps.ok else []
    gpus = parse_gpu_info(info.stdout) if info.ok else []
    facts = {"held_by": held, "gpus": gpus, "not_checked": problems}
    gpu = "; ".join(f"{g['name']}, driver {g['driver_version']}" for g in gpus)
    if held:
        text = "held by " + "; ".join(held)
        return Check(node, "gpu", FAIL if strict else WARN, text, facts)
    if len(problems) == 2:
        return Check(node, "gpu", SKIP, "not checked: " + "; ".join(problems), facts)
    text = (
        "free: "
        + ("no other engine container" if containers.ok else "")
        + (", " if containers.ok and apps.ok else "")
    )
    text += "no compute process" if apps.ok else ""
    text += f" ({gpu})" if gpu else ""
    text += f" ({'; '.join(problems)}: not checked there)" if problems else ""
    return Check(node, "gpu", OK, text, facts)
